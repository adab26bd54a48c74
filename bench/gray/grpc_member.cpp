// The gRPC member process and the gRPC client (members.hpp); built with
// RPCLB_BUILD_GRAY_BENCH (grpc_off.cpp stands in otherwise).
#include "members.hpp"

#include "gray.grpc.pb.h"

#include "../support/harness.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/parse.hpp>

#include <grpcpp/grpcpp.h>

#include <map>

namespace json = boost::json;

namespace gray {

bool grpc_built() { return true; }

namespace {

/// Hands each call to the thread pool, which serves it with the member's Behaviour (the
/// call's deadline from its context) and finishes it: the same worker-pool shape as an
/// rpclb member.
class Service final : public ::gray::Gray::CallbackService {
public:
    Service(Member& member, int index) : member_(member), index_(index), pool_(member_threads) {}
    ~Service() override { pool_.join(); }

    grpc::ServerUnaryReactor* Work(grpc::CallbackServerContext* context, const WorkRequest*,
                                   WorkReply* reply) override {
        auto* reactor = context->DefaultReactor();
        boost::asio::post(pool_, [this, context, reply, reactor] {
            const auto left = context->deadline() - std::chrono::system_clock::now();
            const auto served = member_.serve(Clock::now() + std::chrono::duration_cast<Clock::duration>(left));
            if (served.expired) {
                reactor->Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "expired in the queue"));
                return;
            }
            if (!served.ok) {
                reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "injected failure"));
                return;
            }
            reply->set_member(index_);
            reply->set_service_us(served.service_us);
            reactor->Finish(grpc::Status::OK);
        });
        return reactor;
    }

private:
    Member& member_;
    int index_;
    boost::asio::thread_pool pool_;
};

class GrpcTarget final : public Target {
public:
    explicit GrpcTarget(const std::vector<std::pair<int, unsigned short>>& members) {
        std::string target = "ipv4:";
        for (std::size_t i = 0; i < members.size(); ++i) {
            target += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(members[i].second);
            by_port_[members[i].second] = members[i].first;
        }
        grpc::ChannelArguments args;
        args.SetLoadBalancingPolicyName("round_robin");
        // A member that starts after the channel (cold_member) is connected soon after.
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
        args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 300);
        channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
        stub_ = ::gray::Gray::NewStub(channel_);
    }

    void call(std::chrono::milliseconds timeout, std::function<void(Reply)> done) override {
        struct State {
            grpc::ClientContext context;
            WorkRequest request;
            WorkReply reply;
            std::function<void(Reply)> done;
        };
        auto* s = new State;
        s->done = std::move(done);
        s->context.set_deadline(std::chrono::system_clock::now() + timeout);
        stub_->async()->Work(&s->context, &s->request, &s->reply, [this, s](grpc::Status status) {
            Reply r;
            r.ok = status.ok();
            if (r.ok) {
                r.member = s->reply.member();
                r.service_us = s->reply.service_us();
            } else {
                r.member = member_of(s->context.peer());
            }
            auto done = std::move(s->done);
            delete s;
            done(r);
        });
    }

private:
    // "ipv4:127.0.0.1:PORT" -> the member's index; -1 when unknown.
    int member_of(const std::string& peer) const {
        const auto colon = peer.rfind(':');
        if (colon == std::string::npos) return -1;
        const auto it = by_port_.find(static_cast<unsigned short>(std::atoi(peer.c_str() + colon + 1)));
        return it == by_port_.end() ? -1 : it->second;
    }

    std::shared_ptr<grpc::Channel> channel_;
    std::unique_ptr<::gray::Gray::Stub> stub_;
    std::map<unsigned short, int> by_port_;
};

}  // namespace

int run_grpc_member(const std::string& text) {
    const auto spec = json::parse(text).as_object();
    const int index = static_cast<int>(spec.at("index").to_number<int>());
    Member member(Behaviour::from_text(spec.at("behaviour").as_string()), static_cast<std::uint64_t>(index) + 1001);
    Service service(member, index);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(spec.at("port").to_number<int>()),
                             grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    auto server = builder.BuildAndStart();
    if (!server || port == 0) bench::die("gRPC member did not start");
    bench::announce_port(static_cast<unsigned short>(port));
    bench::wait_for_stdin_eof();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return 0;
}

std::unique_ptr<Target> make_grpc_target(const std::vector<std::pair<int, unsigned short>>& members) {
    return std::make_unique<GrpcTarget>(members);
}

}  // namespace gray
