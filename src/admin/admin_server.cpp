// AdminServer: options, life cycle and the commands of the admin protocol.
#include "admin/admin_impl.hpp"

#include <rpclb/cluster_async.hpp>
#include <rpclb/config.hpp>
#include <rpclb/detail/host_port.hpp>
#include <rpclb/detail/options_check.hpp>
#include <rpclb/error.hpp>
#include <rpclb/groups.hpp>
#include <rpclb/load_balancer.hpp>
#include <rpclb/log.hpp>
#include <rpclb/plugin_registry.hpp>
#include <rpclb/telemetry.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <future>
#include <map>
#include <stdexcept>

namespace rpclb {

namespace json = boost::json;
using tcp = boost::asio::ip::tcp;
using admin::CommandError;
using admin::Error;

namespace {

tcp::endpoint parse_admin_address(const std::string& text) {
    try {
        return detail::parse_listen_address(text);  // the rules of a node's listen address
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("admin address ") + e.what());
    }
}

[[noreturn]] void fail(std::string_view code, std::string message) {
    throw CommandError{Error{std::string(code), std::move(message)}};
}

std::string text_of(const json::object& body, std::string_view key) {
    return std::string(body.at(key).as_string());  // check_fields made sure it is a string
}

json::value to_json_array(const std::vector<std::string>& names) { return json::value_from(names); }

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool admin::is_loopback(const boost::asio::ip::address& address) noexcept { return address.is_loopback(); }

admin::State::State(Cluster& c, AdminOptions o, std::function<void()> stop)
    : cluster(c), options(std::move(o)), request_stop(std::move(stop)) {
    if (options.max_subscribers < 1 || options.max_subscribers > 1024)
        throw std::invalid_argument("admin max_subscribers must be in 1..1024");
    if (options.subscriber_queue < 1 || options.subscriber_queue > 1000000)
        throw std::invalid_argument("admin subscriber_queue must be in 1..1000000");
    if (options.forward_timeout <= std::chrono::milliseconds::zero())
        throw std::invalid_argument("admin forward_timeout must be positive");
    configured = parse_admin_address(options.listen);
    if (options.token.empty() && !admin::is_loopback(configured.address()))
        throw std::invalid_argument("admin address \"" + options.listen +
                                    "\" is not a loopback address: give a token (--admin-token or "
                                    "RPCLB_ADMIN_TOKEN) or listen on 127.0.0.1");
}

// ---- the state a request sees ----------------------------------------------------------------

std::string admin::State::not_ready_reason() const {
    if (stopping) return "stopping";
    if (drained) return "drained";
    if (!ready) return "starting";
    // A node no peer will take can serve nothing the cluster routes to it.
    if (auto by = cluster.cookie_refused_by()) return "cookie refused by " + *by;
    return {};
}

admin::NodeView admin::State::view() const {
    admin::NodeView v;
    v.node = cluster.name();
    v.incarnation = cluster.incarnation();
    v.ready = ready_now();
    v.drained = drained;
    v.connections = cluster.connected_nodes().size();
    v.health = cluster.stats();
    v.admin = AdminStats{requests, wrong_tokens, bad_requests, subscribers, events_dropped->load()};
    for (const auto& name : cluster.balancer_names()) {
        auto lb = cluster.balancer(name);
        if (!lb) continue;  // stopped meanwhile
        const auto& b = **lb;
        v.balancers.push_back({name, b.options().algorithm, b.members()->nodes.size(), b.joined(), b.in_flight(),
                               b.serving(), admin::in_flight_per_member(b), b.hedge_stats()});
    }
    if (metrics) v.series = metrics->snapshot();
    return v;
}

std::string admin::State::metrics_text() const {
    auto text = admin::prometheus_families(view());
    if (metrics) text += metrics->prometheus_text();
    return text;
}

// ---- commands --------------------------------------------------------------------------------

json::object admin::State::execute(const admin::Request& request) {
    ++requests;
    if (!request.node.empty() && request.node != cluster.name()) return forward(request);
    try {
        return admin::answer(request.id, run_local(request));
    } catch (const CommandError& e) {
        return admin::error_answer(request.id, e.error);
    } catch (const std::exception& e) {
        return admin::error_answer(request.id, {std::string(admin::code::failed), e.what()});
    }
}

json::object admin::State::forward(const admin::Request& request) {
    if (request.cmd == "subscribe" || request.cmd == "unsubscribe" || request.cmd == "auth")
        return admin::error_answer(request.id, {std::string(admin::code::unsupported),
                                                request.cmd + " is served by the node the console is connected to"});
    json::object body = request.body;
    body.erase("token");
    body.erase("node");
    CallOptions call;
    call.timeout = options.forward_timeout;
    auto result = cluster.call(request.node, admin_module, admin_function, json::array{body}, call);
    if (!result) {
        const auto& e = result.error();
        const auto message =
            e.code == ErrorCode::not_found ? "node " + request.node + " has no admin listener to forward to"
            : e.is(Failure::no_connection)
                ? "node " + request.node + " is not connected to " + cluster.name() + " (unknown, or gone)"
                : "node " + request.node + ": " + e.message;
        return admin::error_answer(request.id, {std::string(admin::code::unavailable), message});
    }
    auto* answer = result->if_object();
    if (!answer || !(answer->contains("result") || answer->contains("error")))
        return admin::error_answer(request.id, {std::string(admin::code::failed),
                                                "node " + request.node + " gave a malformed answer"});
    (*answer)["id"] = request.id;
    return std::move(*answer);
}

json::value admin::State::run_local(const admin::Request& r) {
    const auto& cmd = r.cmd;
    if (cmd == "self") {
        json::object self{{"name", cluster.name()},
                          {"incarnation", cluster.incarnation()},
                          {"ready", ready_now()},
                          {"drained", drained.load()},
                          {"uptime_s", ms_since(created) / 1000.0},
                          {"connections", cluster.connected_nodes().size()}};
        if (auto why = not_ready_reason(); !why.empty()) self["not_ready"] = std::move(why);
        if (auto ep = cluster.listen_endpoint()) self["listen"] = detail::to_host_port(*ep);
        if (bound) self["admin"] = detail::to_host_port(*bound);
        return self;
    }
    if (cmd == "nodes") {
        // Ask every connected node for its identity at once; the answer's round trip is
        // the RTT shown.
        json::array nodes;
        admin::Request self_request;
        self_request.cmd = "self";
        auto me = run_local(self_request).as_object();
        me["self"] = true;
        me["connected"] = true;
        nodes.push_back(std::move(me));
        struct Pending {
            std::string node;
            std::chrono::steady_clock::time_point sent;
            std::future<CallResult> answer;
        };
        std::vector<Pending> pending;
        CallOptions call;
        call.timeout = std::chrono::seconds(2);
        for (auto& peer : cluster.connected_nodes()) {
            const auto sent = std::chrono::steady_clock::now();
            auto f = cluster.async_call(peer, std::string(admin_module), std::string(admin_function),
                                        json::array{json::object{{"id", 0}, {"cmd", "self"}}}, call,
                                        boost::asio::use_future);
            pending.push_back({std::move(peer), sent, std::move(f)});
        }
        for (auto& p : pending) {
            auto result = p.answer.get();
            const double rtt = ms_since(p.sent);
            json::object entry;
            if (result && result->is_object() && result->as_object().contains("result")) {
                entry = result->as_object().at("result").as_object();
                entry["rtt_ms"] = rtt;
            } else {
                entry["name"] = p.node;
                // A node without an admin listener has no admin function to answer; any
                // other failure is a node whose listener did not answer.
                const auto no_answer = "no answer from " + p.node + "'s admin listener";
                entry["error"] = result || result.error().code == ErrorCode::not_found ? std::string("no admin listener")
                                 : result.error().is(Failure::timeout)
                                     ? no_answer + " within " + std::to_string(call.timeout.count()) + " ms"
                                 : result.error().is(Failure::no_connection)
                                     ? no_answer + ": the link to it closed (frozen, gone or unreachable)"
                                     : no_answer + ": " + result.error().message;
            }
            entry["self"] = false;
            entry["connected"] = true;
            if (const auto rtt = cluster.keepalive_rtt(p.node))
                entry["keepalive_rtt_ms"] = std::chrono::duration<double, std::milli>(*rtt).count();
            else
                entry["keepalive_rtt_ms"] = nullptr;
            nodes.push_back(std::move(entry));
        }
        return json::object{{"nodes", std::move(nodes)}};
    }
    if (cmd == "balancers") {
        const auto calls = admin::balancer_calls(metrics ? metrics->snapshot() : std::vector<Metrics::Series>{});
        json::array list;
        for (const auto& name : cluster.balancer_names()) {
            auto lb = cluster.balancer(name);
            if (!lb) continue;
            const auto& b = **lb;
            json::object o = to_json(b.options());
            o["members"] = to_json_array(b.members()->nodes);
            o["joined"] = b.joined();
            o["in_flight"] = b.in_flight();
            json::object by_member;
            for (const auto& [node, n] : admin::in_flight_per_member(b)) by_member[node] = n;
            o["in_flight_by_member"] = std::move(by_member);
            o["serving"] = b.serving();
            const auto h = b.hedge_stats();
            o["hedging"] = json::object{{"hedged_calls", h.hedged_calls}, {"hedges", h.hedges},
                                        {"hedge_wins", h.hedge_wins},     {"budget_refusals", h.budget_refusals},
                                        {"late_replies", h.late_replies}, {"retries", h.retries}};
            json::object by_status;
            std::uint64_t total = 0;
            json::value p50 = nullptr, p99 = nullptr;
            if (auto it = calls.find(name); it != calls.end()) {
                for (const auto& [status, n] : it->second.by_status) {
                    by_status[status] = n;
                    total += n;
                }
                const auto& bounds = admin::duration_bounds_ms();
                if (auto q = admin::histogram_quantile(0.5, bounds, it->second.buckets)) p50 = *q;
                if (auto q = admin::histogram_quantile(0.99, bounds, it->second.buckets)) p99 = *q;
            }
            o["calls"] = total;
            o["calls_by_status"] = std::move(by_status);
            o["p50_ms"] = p50;
            o["p99_ms"] = p99;
            list.push_back(std::move(o));
        }
        json::array parked;
        {
            std::lock_guard lock(drain_mutex);
            for (const auto& b : drained_balancers) parked.push_back(json::value(b.name));
        }
        return json::object{{"node", cluster.name()}, {"balancers", std::move(list)}, {"drained", std::move(parked)}};
    }
    if (cmd == "plugins") {
        // The plugins this node's registry loaded, with the balancers that use each now.
        std::map<std::string, json::array> users;
        for (const auto& name : cluster.balancer_names())
            if (auto lb = cluster.balancer(name)) users[(*lb)->options().algorithm].push_back(json::value(name));
        json::array list;
        for (const auto& p : cluster.plugins().loaded()) {
            auto& used = users[p.name];
            list.push_back(json::object{{"name", p.name},
                                        {"file", p.file.string()},
                                        {"rpclb_version", p.rpclb_version},
                                        {"abi_version", p.abi_version},
                                        {"compiler", p.compiler},
                                        {"loads", p.loads},
                                        {"balancers", std::move(used)}});
        }
        json::array path;
        for (const auto& dir : cluster.plugins().search_path()) path.push_back(json::value(dir.string()));
        return json::object{{"node", cluster.name()}, {"plugins", std::move(list)}, {"search_path", std::move(path)}};
    }
    if (cmd == "groups") {
        json::array groups;
        for (const auto& g : cluster.groups().group_names())
            groups.push_back(json::object{{"group", g}, {"members", to_json_array(cluster.groups().members(g)->nodes)}});
        return json::object{{"groups", std::move(groups)}};
    }
    if (cmd == "stats") {
        const auto v = view();
        return json::object{
            {"node", v.node},
            {"incarnation", v.incarnation},
            {"uptime_s", ms_since(created) / 1000.0},
            {"ready", ready_now()},
            {"drained", v.drained},
            {"connections", v.connections},
            {"health",
             {{"bad_frames", v.health.bad_frames},
              {"auth_failures", v.health.auth_failures},
              {"peers_lost", v.health.peers_lost},
              {"unauthenticated_refused", v.health.unauthenticated_refused},
              {"oversize_before_handshake", v.health.oversize_before_handshake},
              {"slow_inline_runs", v.health.slow_inline_runs},
              {"expired_requests", v.health.expired_requests},
              {"bad_traceparents", v.health.bad_traceparents},
              {"channel_calls", v.health.channel_calls},
              {"channels_open", v.health.channels_open}}},
            {"admin",
             {{"requests", v.admin.requests},
              {"wrong_tokens", v.admin.wrong_tokens},
              {"bad_requests", v.admin.bad_requests},
              {"subscribers", v.admin.subscribers},
              {"events_dropped", v.admin.events_dropped}}},
            {"metrics", metrics ? metrics->to_json() : json::value(nullptr)},
        };
    }
    if (cmd == "metrics") return json::object{{"node", cluster.name()}, {"text", metrics_text()}};
    if (cmd == "drain") {
        // Stop every hosted balancer (leave its group, wait for its calls) and remember its
        // options for undrain; direct calls and the process go on.
        std::lock_guard lock(drain_mutex);
        drained = true;
        json::array names;
        for (const auto& name : cluster.balancer_names()) {
            auto lb = cluster.balancer(name);
            if (!lb || !(*lb)->hosted()) continue;
            auto options = (*lb)->options();
            lb->reset();
            if (cluster.stop_balancer(name)) {
                names.push_back(json::value(name));
                drained_balancers.push_back(std::move(options));
            }
        }
        return json::object{{"node", cluster.name()}, {"drained", std::move(names)}};
    }
    if (cmd == "undrain") {
        std::lock_guard lock(drain_mutex);
        json::array started, failed;
        auto parked = std::move(drained_balancers);
        drained_balancers.clear();
        for (auto& b : parked) {
            try {
                cluster.start_balancer(b);
                started.push_back(json::value(b.name));
            } catch (const std::exception& e) {
                failed.push_back(json::object{{"name", b.name}, {"message", e.what()}});
            }
        }
        drained = false;
        return json::object{{"node", cluster.name()}, {"started", std::move(started)}, {"failed", std::move(failed)}};
    }
    if (cmd == "stop") {
        if (!request_stop) fail(admin::code::unsupported, "this program gave the admin listener no way to stop it");
        stopping = true;
        request_stop();
        return json::object{{"node", cluster.name()}, {"stopping", true}};
    }
    if (cmd == "balancer_start") {
        json::object fields = r.body;
        for (const auto* key : {"id", "token", "cmd", "node"}) fields.erase(key);
        auto options = load_balancer_options_from_json(fields);
        if (!options) fail(admin::code::bad_request, "balancer_start: " + options.error().message);
        try {
            cluster.start_balancer(*options);
        } catch (const std::exception& e) {
            fail(admin::code::failed, e.what());
        }
        return json::object{{"node", cluster.name()}, {"started", options->name}};
    }
    if (cmd == "balancer_stop") {
        const auto name = text_of(r.body, "name");
        if (!cluster.stop_balancer(name))
            fail(admin::code::not_found, "no balancer \"" + name + "\" is hosted on " + cluster.name());
        return json::object{{"node", cluster.name()}, {"stopped", name}};
    }
    if (cmd == "balancer_set_algorithm" || cmd == "balancer_set_options") {
        const auto name = text_of(r.body, "name");
        // Only a hosted balancer: Cluster::balancer would build a routing-only one.
        std::shared_ptr<LoadBalancer> lb;
        for (const auto& hosted : cluster.balancer_names()) {
            if (hosted != name) continue;
            if (auto found = cluster.balancer(name); found && (*found)->hosted()) lb = *found;
        }
        if (!lb) fail(admin::code::not_found, "no balancer \"" + name + "\" is hosted on " + cluster.name());
        json::object opts;
        if (const auto* o = r.body.if_contains("algorithm_opts")) opts = o->as_object();
        const json::object previous{{"algorithm", lb->algorithm_name()}, {"algorithm_opts", lb->algorithm_options()}};
        auto changed = cmd == "balancer_set_options" ? lb->set_options(opts)
                                                     : lb->set_algorithm(text_of(r.body, "algorithm"), opts);
        if (!changed) {
            const auto& e = changed.error();
            fail(e.code == ErrorCode::not_found     ? admin::code::not_found
                 : e.code == ErrorCode::bad_request ? admin::code::bad_request
                                                    : admin::code::failed,
                 e.message);
        }
        return json::object{{"node", cluster.name()},
                            {"balancer", name},
                            {"algorithm", lb->algorithm_name()},
                            {"algorithm_opts", lb->algorithm_options()},
                            {"previous", previous}};
    }
    if (cmd == "log_level") {
        const auto level = text_of(r.body, "level");
        try {
            log::set_level(level);
        } catch (const std::invalid_argument& e) {
            fail(admin::code::bad_request, e.what());
        }
        return json::object{{"node", cluster.name()}, {"log_level", level}};
    }
    if (cmd == "reload_tls") {
        if (!cluster.options().tls.enabled())
            fail(admin::code::unsupported, "TLS is off on " + cluster.name() + " (no tls.cert): nothing to reload");
        if (auto reloaded = cluster.reload_tls(); !reloaded) fail(admin::code::failed, reloaded.error().message);
        return json::object{{"node", cluster.name()}, {"reloaded", true}};
    }
    if (cmd == "auth") return json::object{{"authenticated", true}};
    fail(admin::code::unknown_command, "command \"" + cmd + "\" is not served here");
}

// ---- AdminServer -------------------------------------------------------------------------------

AdminServer::AdminServer(Cluster& cluster, AdminOptions options, std::function<void()> request_stop)
    : impl_(std::make_shared<admin::State>(cluster, std::move(options), std::move(request_stop))) {
    // Forwarded requests: the other node checked the token; the mesh checked the cookie.
    std::weak_ptr<admin::State> weak = impl_;
    cluster.register_function(std::string(admin_module), std::string(admin_function),
                              [weak](const json::array& args) -> CallResult {
                                  auto impl = weak.lock();
                                  if (!impl)
                                      return ErrorMessage{ErrorCode::service_unavailable,
                                                          "the admin listener of this node is stopped", {}};
                                  if (args.size() != 1 || !args[0].is_object())
                                      return ErrorMessage{ErrorCode::bad_request,
                                                          "rpclb_admin.command takes one request object", {}};
                                  admin::Request request;
                                  if (auto e = admin::parse_request(json::serialize(args[0]), request))
                                      return json::value(admin::error_answer(request.id, *e));
                                  request.node.clear();  // it is for this node
                                  return json::value(impl->execute(request));
                              });
}

AdminServer::~AdminServer() { stop(); }

void AdminServer::start() {
    {
        std::lock_guard lock(impl_->state_mutex);
        if (impl_->started) throw std::logic_error("AdminServer::start called twice");
        impl_->started = true;
    }
    impl_->metrics = std::make_unique<Metrics>(impl_->cluster.telemetry());
    impl_->listen();
}

void AdminServer::stop() {
    {
        std::lock_guard lock(impl_->state_mutex);
        if (!impl_->started || impl_->stopped) return;
        impl_->stopped = true;
    }
    impl_->stopping = true;
    impl_->shutdown();
}

std::optional<tcp::endpoint> AdminServer::endpoint() const { return impl_->bound; }
void AdminServer::set_ready(bool ready) noexcept { impl_->ready = ready; }
void AdminServer::set_stopping() noexcept { impl_->stopping = true; }
bool AdminServer::drained() const noexcept { return impl_->drained; }

AdminStats AdminServer::stats() const noexcept {
    return AdminStats{impl_->requests, impl_->wrong_tokens, impl_->bad_requests, impl_->subscribers,
                      impl_->events_dropped->load()};
}

std::string AdminServer::metrics_text() const { return impl_->metrics_text(); }

json::object AdminServer::execute(const json::object& request) {
    admin::Request r;
    if (auto e = admin::parse_request(json::serialize(request), r)) return admin::error_answer(r.id, *e);
    return impl_->execute(r);
}

}  // namespace rpclb
