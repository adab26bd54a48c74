#define BOOST_TEST_MODULE block_cache
// BlockCache: the memory of large decoded values, kept for the next ones
// (src/transport/block_cache.hpp), and the decoder's use of it.

#include "../../src/transport/block_cache.hpp"

#include <rpclb/cluster.hpp>
#include <rpclb/detail/wire.hpp>
#include <rpclb/error.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/array.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>
#include <boost/test/unit_test.hpp>

#include "support/node.hpp"
#include "support/wait.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace json = boost::json;
namespace proto = rpclb::detail::wire;
using rpclb::detail::BlockCache;

namespace {

std::string request_frame(std::size_t payload) {
    proto::Request r;
    r.id = 7;
    r.module = "m";
    r.function = "f";
    r.args = json::array{1, std::string(payload, 'x')};
    return proto::encode(r);
}

proto::Request decode_request(const std::string& text) {
    auto decoded = proto::decode(text, 1 << 24);
    BOOST_REQUIRE(decoded.has_value());
    auto* request = std::get_if<proto::Request>(&*decoded);
    BOOST_REQUIRE(request != nullptr);
    return std::move(*request);
}

bool in_cache(const json::storage_ptr& sp) { return sp.get() == &BlockCache::instance(); }

}  // namespace

BOOST_AUTO_TEST_CASE(size_classes_are_quarter_steps_between_powers_of_two) {
    BOOST_TEST(BlockCache::class_size(BlockCache::min_block) == 16u * 1024u);
    BOOST_TEST(BlockCache::class_size(16 * 1024 + 1) == 20u * 1024u);
    BOOST_TEST(BlockCache::class_size(24 * 1024) == 24u * 1024u);
    BOOST_TEST(BlockCache::class_size(32 * 1024 + 1) == 40u * 1024u);
    BOOST_TEST(BlockCache::class_size(64 * 1024 + 5) == 80u * 1024u);  // a 64 KiB string
    BOOST_TEST(BlockCache::class_size(BlockCache::max_block) == BlockCache::max_block);
    for (std::size_t n = BlockCache::min_block; n <= BlockCache::max_block; n += 977) {
        const auto c = BlockCache::class_size(n);
        BOOST_TEST_REQUIRE(c >= n);
        BOOST_TEST_REQUIRE(c * 4 <= n * 5 + 4 * 4096);  // at most a fifth wasted
    }
}

// Before: the arguments were move-assigned out of the parsed document into a default
// Request, which copies between storages, and every large string was freed to glibc.
BOOST_AUTO_TEST_CASE(a_large_frame_is_decoded_into_the_cache_and_its_blocks_are_reused) {
    BlockCache::instance().trim(true);
    const auto text = request_frame(64 * 1024);
    {
        auto request = decode_request(text);
        BOOST_TEST(in_cache(request.args.storage()));  // kept, not copied out of the document
        BOOST_TEST(request.args.at(1).as_string().size() == 64u * 1024u);
    }
    BOOST_TEST(BlockCache::instance().kept_bytes() >= 80u * 1024u);  // the string's block came back
    const auto reused = BlockCache::instance().reuses();
    {
        auto request = decode_request(text);
        BOOST_TEST(request.args.at(1).as_string() == std::string(64 * 1024, 'x'));
    }
    BOOST_TEST(BlockCache::instance().reuses() > reused);
}

BOOST_AUTO_TEST_CASE(a_small_frame_uses_the_default_storage) {
    auto request = decode_request(request_frame(100));
    BOOST_TEST(!in_cache(request.args.storage()));
}

BOOST_AUTO_TEST_CASE(a_large_answer_keeps_the_cache_as_its_storage) {
    proto::Response r;
    r.id = 3;
    r.result = rpclb::CallResult(json::value(std::string(40 * 1024, 'y')));
    auto decoded = proto::decode(proto::encode(r), 1 << 24);
    BOOST_REQUIRE(decoded.has_value());
    auto* response = std::get_if<proto::Response>(&*decoded);
    BOOST_REQUIRE(response != nullptr);
    BOOST_REQUIRE(response->result.has_value());
    BOOST_TEST(in_cache(response->result->storage()));
    BOOST_TEST(response->result->as_string().size() == 40u * 1024u);
}

BOOST_AUTO_TEST_CASE(the_cache_is_bounded_and_trimmed_when_unused) {
    auto& cache = BlockCache::instance();
    cache.trim(true);
    const json::storage_ptr sp = BlockCache::storage();
    std::vector<void*> blocks;
    for (int i = 0; i < 200; ++i) blocks.push_back(sp->allocate(64 * 1024));  // 15.6 MiB
    for (void* b : blocks) sp->deallocate(b, 64 * 1024);
    BOOST_TEST(cache.kept_bytes() > 0u);
    BOOST_TEST(cache.kept_bytes() <= BlockCache::max_bytes);
    cache.trim();  // used since the last trim: kept
    BOOST_TEST(cache.kept_bytes() > 0u);
    cache.trim();  // not used since: freed
    BOOST_TEST(cache.kept_bytes() == 0u);

    // Outside the cached sizes: plain new and delete, nothing kept.
    void* small = sp->allocate(100);
    void* huge = sp->allocate(BlockCache::max_block + 1);
    sp->deallocate(small, 100);
    sp->deallocate(huge, BlockCache::max_block + 1);
    BOOST_TEST(cache.kept_bytes() == 0u);
}

// Values decoded on a network thread are freed on whichever thread the caller uses.
// (No Boost.Test assertion inside the threads: they are not thread-safe.)
BOOST_AUTO_TEST_CASE(blocks_taken_on_one_thread_and_freed_on_another) {
    const auto text = request_frame(32 * 1024);
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 200; ++i) {
                auto decoded = proto::decode(text, 1 << 24);
                auto* request = decoded ? std::get_if<proto::Request>(&*decoded) : nullptr;
                if (!request || request->args.size() != 2) {
                    ++bad;
                    continue;
                }
                std::thread([args = std::move(request->args)]() mutable { args.clear(); }).join();
            }
        });
    }
    for (auto& t : threads) t.join();
    BOOST_TEST(bad.load() == 0);
    BOOST_TEST(BlockCache::instance().kept_bytes() <= BlockCache::max_bytes);
}

// A node's stop frees the kept blocks: no keep-alive tick of its own would any more.
BOOST_AUTO_TEST_CASE(a_stopping_node_frees_the_kept_blocks) {
    BlockCache::instance().trim(true);
    rpclb::Cluster a(rpclb::test::in_process_node_options("a@127.0.0.1"));
    a.start();
    rpclb::Cluster b(rpclb::test::in_process_node_options(
        "b@127.0.0.1", {"127.0.0.1:" + std::to_string(a.listen_endpoint()->port())}));
    // A small request and a large answer: only a decodes a large frame. (With a large
    // request, b's worker could free its decoded arguments into the process's one cache
    // after a's stop had emptied it; seen under load.)
    b.register_function("t", "big", [](const json::array&) -> rpclb::CallResult {
        return json::value(std::string(64 * 1024, 'z'));
    });
    b.start();
    BOOST_REQUIRE(rpclb::test::eventually([&] { return a.connected_nodes().size() == 1; }, std::chrono::seconds(5)));
    auto r = a.call("b@127.0.0.1", "t", "big", {});
    BOOST_REQUIRE(r.has_value());
    r = rpclb::CallResult(json::value(nullptr));  // the answer's blocks go back to the cache
    BOOST_TEST(BlockCache::instance().kept_bytes() > 0u);
    a.stop();
    BOOST_TEST(BlockCache::instance().kept_bytes() == 0u);
    b.stop();
}
