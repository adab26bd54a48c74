// Fault-test support: rpclb-node processes inside a NetnsLab (faults/netns.hpp), each read
// through its admin port, and the fixture that starts a mesh of them.
#pragma once

#include "faults/netns.hpp"
#include "support/admin.hpp"
#include "support/node.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"
#include <rpclb/groups.hpp>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace rpclb::test::faults {

/// Group name → sorted members, as one node sees them.
using GroupView = std::map<std::string, std::vector<std::string>>;

/// One rpclb-node inside a NetnsLab namespace, with its admin port open on the
/// namespace's loopback and an admin WebSocket to it held by the test.
class LabNode {
public:
    /// Starts node `i` of `lab` as n<i>@10.77.0.(i+1) listening on port 7000, seeded with
    /// `seeds` (lab node indices), hosting `balancers` ("w=round_robin"), with `extra_args`.
    /// Waits up to 10 s for it to listen; throws with its log otherwise.
    LabNode(NetnsLab& lab, const std::filesystem::path& log_dir, int i, const std::vector<int>& seeds,
            const std::vector<std::string>& balancers, const std::vector<std::string>& extra_args = {})
        : index_(i), name_("n" + std::to_string(i) + "@" + lab.address(i)) {
        std::vector<std::string> args{"--name", name_, "--listen", lab.address(i) + ":7000", "--plugins",
                                      plugin_dir().string(), "--admin", "127.0.0.1:0", "--log-level", "info"};
        for (int s : seeds) args.insert(args.end(), {"--seed", lab.address(s) + ":7000"});
        for (const auto& b : balancers) args.insert(args.end(), {"--balancer", b});
        args.insert(args.end(), extra_args.begin(), extra_args.end());
        process_ = std::make_unique<Process>(lab.ip_tool(), lab.exec_args(i, bin_dir() / "rpclb-node", args),
                                             std::vector<std::pair<std::string, std::string>>{{"RPCLB_COOKIE", test_cookie}},
                                             log_dir / ("n" + std::to_string(i) + ".log"));
        if (!process_->wait_for_line("listening on ", Clock::now() + 10s))
            throw std::runtime_error(name_ + " did not start; its log:\n" + process_->stderr_text());
        std::string admin;
        for (const auto& line : process_->stdout_lines())
            if (line.rfind("admin on ", 0) == 0) admin = line.substr(9);
        if (admin.empty()) throw std::runtime_error(name_ + " printed no `admin on` line");
        admin_ = lab.in_node(i, [&] { return std::make_unique<AdminSocket>(admin); });
    }

    const std::string& name() const noexcept { return name_; }
    int index() const noexcept { return index_; }
    Process& process() noexcept { return *process_; }
    std::string log() const { return process_->stderr_text(); }

    /// Every non-empty group and its members, as this node sees them (admin `groups`).
    GroupView groups() {
        GroupView view;
        const auto answer = ask("groups");
        for (const auto& g : answer.at("result").at("groups").as_array()) {
            auto& members = view[std::string(g.at("group").as_string())];
            for (const auto& m : g.at("members").as_array()) members.emplace_back(m.as_string());
            std::sort(members.begin(), members.end());
        }
        return view;
    }

    /// Calls routed here through `balancer` that this node is running now (admin
    /// `balancers`); -1 when it hosts no such balancer.
    std::int64_t serving(const std::string& balancer) {
        const auto answer = ask("balancers");
        for (const auto& b : answer.at("result").at("balancers").as_array())
            if (b.at("name").as_string() == balancer) return b.at("serving").to_number<std::int64_t>();
        return -1;
    }

    /// The admin `stats` answer's result.
    boost::json::object stats() { return ask("stats").at("result").as_object(); }

private:
    boost::json::object ask(const std::string& cmd) {
        const auto answer = admin_->ask(R"({"id": )" + std::to_string(++requests_) + R"(, "cmd": ")" + cmd + R"("})");
        if (!answer.contains("result"))
            throw std::runtime_error(name_ + " answered " + cmd + " with " + boost::json::serialize(answer));
        return answer;
    }

    int index_;
    std::string name_;
    std::unique_ptr<Process> process_;
    std::unique_ptr<AdminSocket> admin_;
    int requests_ = 0;
};


/// Polls `predicate` every `poll` until it holds; how long that took, or nullopt when it
/// still does not hold after `timeout`.
template <class Predicate>
std::optional<std::chrono::milliseconds> time_until(Predicate&& predicate, std::chrono::milliseconds timeout,
                                                    std::chrono::milliseconds poll = 20ms) {
    const auto start = Clock::now();
    if (eventually(predicate, timeout, poll))
        return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return std::nullopt;
}

/// Polls every predicate every `poll` until all hold or `timeout` passes; for each, the
/// time from `since` to the first poll at which it held (nullopt: never). A predicate that
/// held once is not asked again.
inline std::vector<std::optional<std::chrono::milliseconds>> first_times(
    const std::vector<std::function<bool()>>& predicates, Clock::time_point since, std::chrono::milliseconds timeout,
    std::chrono::milliseconds poll = 20ms) {
    std::vector<std::optional<std::chrono::milliseconds>> times(predicates.size());
    eventually(
        [&] {
            bool all = true;
            for (std::size_t i = 0; i < predicates.size(); ++i) {
                if (!times[i] && predicates[i]())
                    times[i] = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
                all = all && times[i].has_value();
            }
            return all;
        },
        timeout, poll);
    return times;
}

/// True when `view` has every balancer group in `groups` with exactly `members` (sorted).
inline bool view_is(const GroupView& view, const std::vector<std::string>& groups,
                    const std::vector<std::string>& members) {
    for (const auto& g : groups) {
        const auto it = view.find(g);
        if (members.empty() ? it != view.end() : it == view.end() || it->second != members) return false;
    }
    return true;
}

/// Fixture of a fault test: a Harness (log directory, logs printed on failure), a NetnsLab
/// and rpclb-node processes in it, each hosting the balancers `w=round_robin` and
/// `h=hash_ring`, seeded with node 0.
class LabMesh : public Harness {
public:
    static inline const std::vector<std::string> balancer_groups{"h", "w"};

    /// `config`, when not empty, is the text of a config file every node reads (--config),
    /// for settings rpclb-node has no flag for.
    explicit LabMesh(int nodes, const std::string& config = {}) : lab(dir(), nodes) {
        std::vector<std::string> extra_args;
        if (!config.empty()) {
            std::ofstream(dir() / "node-config.json") << config;
            extra_args = {"--config", (dir() / "node-config.json").string()};
        }
        for (int i = 0; i < nodes; ++i)
            this->nodes.push_back(std::make_unique<LabNode>(lab, dir(), i, i == 0 ? std::vector<int>{} : std::vector<int>{0},
                                                            std::vector<std::string>{"w=round_robin", "h=hash_ring"},
                                                            extra_args));
    }

    /// Every node's name, sorted.
    std::vector<std::string> names() const {
        std::vector<std::string> v;
        for (const auto& n : nodes) v.push_back(n->name());
        return sorted(v);
    }
    /// Names of the nodes at `indices`, sorted.
    std::vector<std::string> names(std::initializer_list<int> indices) const {
        std::vector<std::string> v;
        for (int i : indices) v.push_back(nodes[static_cast<std::size_t>(i)]->name());
        return sorted(v);
    }
    /// True when every node sees every node in every balancer group.
    bool converged() {
        const auto all = names();
        for (auto& n : nodes)
            if (!view_is(n->groups(), balancer_groups, all)) return false;
        return true;
    }
    /// True when node `i` sees exactly `members` in every balancer group.
    bool sees(int i, const std::vector<std::string>& members) {
        return view_is(nodes[static_cast<std::size_t>(i)]->groups(), balancer_groups, members);
    }

    /// Runs `program args...` inside node `i`'s namespace as a Process (stderr to
    /// <dir>/<label>.log).
    std::unique_ptr<Process> spawn_in(int i, const std::string& program, const std::vector<std::string>& args,
                                      const std::string& label) {
        return std::make_unique<Process>(lab.ip_tool(), lab.exec_args(i, bin_dir() / program, args),
                                         std::vector<std::pair<std::string, std::string>>{{"RPCLB_COOKIE", test_cookie}},
                                         dir() / (label + ".log"));
    }

    /// What a router in one namespace makes of hash_ring balancer `h`.
    struct Picks {
        std::vector<std::string> members;  ///< the balancer's members it routes over
        std::vector<std::string> owners;   ///< owner of key-0 .. key-(keys-1); "(none)" for an error
        std::string line;                  ///< rpclb-fault-client's output, for messages
    };

    /// The owner of keys key-0 .. key-(keys-1) through hash_ring balancer `h`, as a client
    /// in node `i`'s namespace routes them (it meets the nodes it can reach from there).
    Picks picks_from(int i, int keys, std::size_t expect_nodes) {
        auto p = spawn_in(i, "rpclb-fault-client",
                          {"picks", "--seed", lab.address(i) + ":7000", "--balancer", "h", "--keys",
                           std::to_string(keys), "--expect-nodes", std::to_string(expect_nodes), "--plugins",
                           plugin_dir().string(), "--name", "picker" + std::to_string(i) + "@" + lab.address(i)},
                          "picks-" + std::to_string(i) + "-" + std::to_string(++pick_runs_));
        const auto line = p->wait_for_line("{", Clock::now() + 20s);
        if (!line) throw std::runtime_error("rpclb-fault-client picks printed nothing: " + p->stderr_text());
        p->wait_exit(5s);
        Picks picks;
        picks.line = *line;
        const auto parsed = boost::json::parse(*line);
        for (const auto& m : parsed.at("members").as_array()) picks.members.emplace_back(m.as_string());
        for (const auto& o : parsed.at("owners").as_array())
            picks.owners.push_back(o.is_string() ? std::string(o.as_string()) : std::string("(none)"));
        return picks;
    }

    NetnsLab lab;  // before the nodes: the nodes are stopped before their namespaces go
    std::vector<std::unique_ptr<LabNode>> nodes;

private:
    int pick_runs_ = 0;
};

}  // namespace rpclb::test::faults
