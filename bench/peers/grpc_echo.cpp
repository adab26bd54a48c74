// gRPC C++ as a peer of rpclb: echo(1, "abc") between two processes over 127.0.0.1.
//
//   latency     sequential blocking calls of the generated sync stub (a fresh ClientContext
//               per call, as the API requires) against a sync-API server;
//   throughput  `--inflight` (64) calls kept outstanding through the callback API
//               (stub->async()) on one channel, each completion issuing the next, against a
//               callback-API server.
// Each server is this binary run again (`--serve sync|callback`); the client reaps it on
// every exit path. With --pin (default) client and servers bind themselves to one CPU before
// gRPC starts any thread, as bench/rpc_roundtrip.cpp does.
//
// Output (parsed by scripts/bench-peers.sh; '#' lines are details):
//   grpc_sync_unary median_us=X p99_us=Y
//   grpc_callback payload=7 inflight=64 calls_per_s=X
//   # grpc_sync_unary_callback_server median_us=X p99_us=Y   (the sync client against the
//     callback-API server, to show which server the latency row should use)
#include "echo.grpc.pb.h"
#include "peer_process.hpp"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <memory>
#include <mutex>

namespace {

using peer_bench::fail;
using rpclb_peers::Echo;
using rpclb_peers::EchoArgs;

const char* const usage =
    "grpc_echo [--pin|--no-pin] [--cpu N] [--count N] [--warmup N] [--seconds S] [--inflight N]\n"
    "  gRPC C++ echo(1, \"abc\"): sync unary latency (median/p99 of --count sequential calls\n"
    "  after --warmup) and callback-API throughput (--inflight calls outstanding for\n"
    "  --seconds after 0.5 s of warm-up). Defaults: pinned to CPU 0, 20000, 2000, 3, 64.";

class SyncEcho final : public Echo::Service {
    grpc::Status Call(grpc::ServerContext*, const EchoArgs* in, EchoArgs* out) override {
        *out = *in;
        return grpc::Status::OK;
    }
};

class CallbackEcho final : public Echo::CallbackService {
    grpc::ServerUnaryReactor* Call(grpc::CallbackServerContext* context, const EchoArgs* in,
                                   EchoArgs* out) override {
        *out = *in;
        auto* reactor = context->DefaultReactor();
        reactor->Finish(grpc::Status::OK);
        return reactor;
    }
};

int serve(const std::string& kind) {
    SyncEcho sync;
    CallbackEcho callback;
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    if (kind == "sync") builder.RegisterService(&sync);
    else builder.RegisterService(&callback);
    auto server = builder.BuildAndStart();
    if (!server || port == 0) fail("gRPC server did not start");
    peer_bench::announce_port_and_wait(static_cast<unsigned>(port));
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    return 0;
}

EchoArgs echo_args() {
    EchoArgs args;
    args.set_n(1);
    args.set_s("abc");
    return args;
}

bool is_echo(const EchoArgs& reply) { return reply.n() == 1 && reply.s() == "abc"; }

std::unique_ptr<Echo::Stub> connect(unsigned short port) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
        fail("gRPC channel did not connect within 10 s");
    return Echo::NewStub(channel);
}

peer_bench::Latency sync_latency(const peer_bench::Options& o, const std::string& server_kind) {
    peer_bench::ServerChild server(server_kind, o);
    auto stub = connect(server.port());
    const EchoArgs request = echo_args();
    EchoArgs reply;
    return peer_bench::time_sequential(o, [&] {
        grpc::ClientContext context;
        const auto status = stub->Call(&context, request, &reply);
        if (!status.ok()) fail("gRPC call failed: " + status.error_message());
        if (!is_echo(reply)) fail("gRPC server echoed " + reply.ShortDebugString());
    });
}

// Keeps `inflight` callback-API calls outstanding; each completion issues the next until
// stopped. Completions run on gRPC's own threads.
class Pipeline {
public:
    explicit Pipeline(Echo::Stub& stub) : stub_(stub), request_(echo_args()) {}

    void start(long inflight) {
        active_ = inflight;
        for (long i = 0; i < inflight; ++i) issue();
    }

    const std::atomic<std::uint64_t>& done() const { return done_; }

    /// Stops issuing and waits (10 s at most) for the outstanding calls to complete.
    void drain() {
        stop_ = true;
        std::unique_lock lock(mutex_);
        if (!idle_.wait_for(lock, std::chrono::seconds(10), [&] { return active_ == 0; }))
            fail("gRPC calls still outstanding 10 s after stop");
        if (!error_.empty()) fail(error_);
    }

private:
    struct Call {
        grpc::ClientContext context;
        EchoArgs reply;
    };

    void issue() {
        auto* call = new Call;
        stub_.async()->Call(&call->context, &request_, &call->reply,
                            [this, call](grpc::Status status) { complete(call, status); });
    }

    void complete(Call* call, const grpc::Status& status) {
        std::string error;
        if (!status.ok()) error = "gRPC call failed: " + status.error_message();
        else if (!is_echo(call->reply)) error = "gRPC server echoed " + call->reply.ShortDebugString();
        delete call;
        if (error.empty()) {
            done_.fetch_add(1, std::memory_order_relaxed);
            if (!stop_) return issue();
        }
        std::lock_guard lock(mutex_);
        if (!error.empty() && error_.empty()) error_ = error;
        stop_ = true;
        if (--active_ == 0) idle_.notify_all();
    }

    Echo::Stub& stub_;
    const EchoArgs request_;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> done_{0};
    std::mutex mutex_;
    std::condition_variable idle_;
    long active_ = 0;
    std::string error_;
};

double callback_throughput(const peer_bench::Options& o) {
    peer_bench::ServerChild server("callback", o);
    auto stub = connect(server.port());
    Pipeline pipeline(*stub);
    pipeline.start(o.inflight);
    const double rate = peer_bench::rate_over_window(pipeline.done(), o.seconds);
    pipeline.drain();
    return rate;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        peer_bench::Options o;
        if (!peer_bench::parse_options(argc, argv, {"sync", "callback"}, usage, o)) return 0;
        if (o.pin) peer_bench::pin_to(o.cpu);  // before gRPC starts its threads
        if (!o.serve.empty()) return serve(o.serve);
        peer_bench::reap_children_on_signals();
        std::printf("# grpc_echo grpc=%s pin=%s cpu=%d count=%ld warmup=%ld seconds=%.1f inflight=%ld loadavg=%s\n",
                    grpc::Version().c_str(), o.pin ? "on" : "off", o.cpu, o.count, o.warmup, o.seconds,
                    o.inflight, peer_bench::load_average().c_str());
        std::fflush(stdout);
        const auto latency = sync_latency(o, "sync");
        std::printf("grpc_sync_unary median_us=%.2f p99_us=%.2f\n", latency.median_us, latency.p99_us);
        std::fflush(stdout);
        // The same sync client against the callback-API server: which server gRPC is faster with.
        const auto against_callback = sync_latency(o, "callback");
        std::printf("# grpc_sync_unary_callback_server median_us=%.2f p99_us=%.2f\n", against_callback.median_us,
                    against_callback.p99_us);
        std::fflush(stdout);
        const double rate = callback_throughput(o);
        std::printf("grpc_callback payload=%zu inflight=%ld calls_per_s=%.0f\n", echo_args().ByteSizeLong(),
                    o.inflight, rate);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "grpc_echo: %s\n", e.what());
        return 1;
    }
}
