// Integration-test helpers for the admin console: nodes started with --admin, runs of the
// rpclb-admin tool, plain HTTP GETs and a raw admin WebSocket (admin_socket.hpp).
#pragma once

#include "admin_socket.hpp"
#include "node.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <vector>

namespace rpclb::test {

/// The admin token of the test clusters.
inline const std::string admin_token = "rpclb-admin-test-token";

/// NodeSpec extra arguments for an admin listener on an ephemeral loopback port.
inline std::vector<std::string> admin_args(const std::string& token = admin_token) {
    return {"--admin", "127.0.0.1:0", "--admin-token", token};
}

/// The "HOST:PORT" a node printed in its `admin on` line (printed before `listening on`).
inline std::string admin_address(Node& node) {
    for (const auto& line : node.process().stdout_lines())
        if (line.rfind("admin on ", 0) == 0) return line.substr(9);
    throw std::runtime_error(node.name() + " printed no `admin on` line");
}

/// What one rpclb-admin run gave.
struct ToolRun {
    int status = -1;  ///< exit code; -1 when it did not exit normally
    std::string out;  ///< stdout
    std::string err;  ///< stderr
    /// stdout parsed as JSON (for --json runs); throws when it is not JSON.
    boost::json::value json() const { return boost::json::parse(out); }
};

/// Runs rpclb-admin with `args` (stderr to <dir>/admin-<n>.log), waits up to `timeout` for
/// it to exit (SIGKILLed and reaped otherwise) and returns its exit code and output.
inline ToolRun run_admin(const std::filesystem::path& dir, const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    static int runs = 0;
    Process p(bin_dir() / "rpclb-admin", args, {}, dir / ("admin-" + std::to_string(++runs) + ".log"));
    const auto deadline = Process::Clock::now() + timeout;
    p.wait_for_line("\x01 no such line", deadline);  // reads stdout to its end
    const auto status = p.wait_exit(deadline);
    ToolRun run;
    if (!status) p.kill();
    else if (WIFEXITED(*status)) run.status = WEXITSTATUS(*status);
    for (const auto& line : p.stdout_lines()) run.out += line + "\n";
    run.err = p.stderr_text();
    return run;
}

/// The `error.code` of an answer, or "" when it has none.
inline std::string error_code_of(const boost::json::object& answer) {
    const auto* e = answer.if_contains("error");
    return e ? std::string(e->at("code").as_string()) : std::string();
}

// Three nodes a, b, c hosting `w` (round_robin), each with an admin listener, and an
// in-process client that sees all three as members.
struct AdminCluster3 : Harness {
    AdminCluster3() {
        a = start_node({.name = "a", .balancers = {"w=round_robin"}, .extra_args = admin_args()});
        b = start_node({.name = "b", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                        .extra_args = admin_args()});
        c = start_node({.name = "c", .seeds = {a->address()}, .balancers = {"w=round_robin"},
                        .extra_args = admin_args()});
        client = start_client({a->address()});
        if (!wait_for_members(*client, "w", {a->name(), b->name(), c->name()}, 10s))
            throw std::runtime_error("w did not get its three members");
    }

    // rpclb-admin against a's admin listener with the right token.
    ToolRun admin(std::vector<std::string> args, const std::string& token = admin_token) {
        args.insert(args.begin(), {"--admin", admin_address(*a), "--token", token});
        return run_admin(dir(), args);
    }

    std::unique_ptr<Node> a, b, c;
    std::unique_ptr<rpclb::Cluster> client;
};

/// A run's exit code and output, for a failed assertion's message.
inline std::string slurp(const ToolRun& r) { return "exit " + std::to_string(r.status) + "\nstdout:\n" + r.out + "stderr:\n" + r.err; }

}  // namespace rpclb::test
