// Why a connection failed, typed (src/transport/link_error.hpp): one LinkError per failure
// whichever Asio, Beast or OpenSSL code reported it, one stable text per LinkError, and
// "never sent" decided by the LinkError, not by what the error's details hold.
#define BOOST_TEST_MODULE link_error
#include "../../src/transport/link_error.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/websocket/error.hpp>
#include <boost/json/parse.hpp>
#include <boost/test/unit_test.hpp>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;
namespace http = beast::http;
using rpclb::detail::LinkClose;
using rpclb::detail::LinkError;
using rpclb::detail::RequestOutcome;
using rpclb::detail::link_error;

namespace {

constexpr int first_value = 1;
constexpr int last_value = static_cast<int>(LinkError::declared_dead);

std::string reason_of(const rpclb::ErrorMessage& e) {
    const auto* v = e.details.if_contains("reason");
    return v && v->is_string() ? std::string(v->get_string()) : std::string("<missing>");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(link_error_mapping)

BOOST_AUTO_TEST_CASE(a_peer_gone_without_a_close_is_one_kind_whichever_call_saw_it) {
    // A peer that died: its kernel's FIN or RST reaches a read as end of stream or reset,
    // a write as a broken pipe or reset, a TLS read as a truncated stream, a WebSocket
    // upgrade as HTTP's end of stream.
    const std::vector<boost::system::error_code> dropped{
        asio::error::eof,           asio::error::connection_reset, asio::error::broken_pipe,
        asio::error::connection_aborted, asio::error::not_connected, asio::error::shut_down,
        http::error::end_of_stream, asio::ssl::error::stream_truncated,
    };
    for (const auto& ec : dropped)
        BOOST_TEST((link_error(ec) == LinkError::reset), ec.what());
}

BOOST_AUTO_TEST_CASE(each_family_of_codes_maps_to_its_kind) {
    const std::vector<std::pair<boost::system::error_code, LinkError>> cases{
        {ws::error::closed, LinkError::closed_by_peer},
        {beast::error::timeout, LinkError::timed_out},
        {asio::error::timed_out, LinkError::timed_out},
        // What the operations other than the first get when Beast's timeout fires.
        {asio::error::operation_aborted, LinkError::timed_out},
        {asio::error::would_block, LinkError::peer_not_reading},
        {asio::error::try_again, LinkError::peer_not_reading},
        {ws::error::message_too_big, LinkError::too_large},
        {http::error::header_limit, LinkError::too_large},
        {boost::system::error_code(1, asio::error::get_ssl_category()), LinkError::tls_failed},
        {ws::error::bad_opcode, LinkError::protocol_error},
        {ws::error::upgrade_declined, LinkError::protocol_error},
        {http::error::bad_version, LinkError::protocol_error},
        {asio::error::no_buffer_space, LinkError::io_error},
        {asio::error::host_unreachable, LinkError::io_error},
    };
    for (const auto& [ec, kind] : cases)
        BOOST_TEST((link_error(ec) == kind), ec.what() << " -> " << to_string(link_error(ec)));
}

BOOST_AUTO_TEST_CASE(the_category_gives_one_stable_text_per_kind) {
    const auto& category = rpclb::detail::link_category();
    BOOST_TEST(std::string(category.name()) == "rpclb.link");
    std::set<std::string> texts;
    for (int v = first_value; v <= last_value; ++v) {
        const auto kind = static_cast<LinkError>(v);
        const auto ec = make_error_code(kind);
        BOOST_TEST((&ec.category() == &category));
        BOOST_TEST((ec == kind));
        BOOST_TEST(ec.message() == std::string(to_string(kind)));
        BOOST_TEST(!ec.message().empty(), v);
        texts.insert(ec.message());
    }
    BOOST_TEST(texts.size() == std::size_t(last_value - first_value + 1), "two kinds share a text");
    // The texts callers see in details.reason (doc/architecture.md "Errors").
    BOOST_TEST(to_string(LinkError::closed_by_peer) == "closed by peer");
    BOOST_TEST(to_string(LinkError::reset) == "connection lost");
    BOOST_TEST(to_string(LinkError::timed_out) == "no answer to probes (the peer is unresponsive)");
    BOOST_TEST(to_string(LinkError::not_connected) == "not connected");
    BOOST_TEST(category.message(last_value + 1).find("unknown") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_close_describes_itself_for_logs_with_what_failed_and_the_code) {
    const boost::system::error_code eof = asio::error::eof;
    const auto written = LinkClose::from(eof, "write");
    BOOST_TEST((written.kind == LinkError::reset));
    BOOST_TEST(written.describe() == "write: " + eof.message());
    BOOST_TEST(LinkClose::from(eof).describe() == "connection lost: " + eof.message());
    BOOST_TEST(LinkClose{LinkError::stopping}.describe() == "this node is stopping");
    const LinkClose resolve{LinkError::resolve_failed, asio::error::host_not_found, "resolve db:7000"};
    BOOST_TEST(resolve.describe() == "resolve db:7000: " + resolve.ec.message());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(request_outcome)

BOOST_AUTO_TEST_CASE(never_sent_is_decided_by_the_link_error_not_by_the_details) {
    // Refused unsent: the LinkError says so; the caller still reads a reason text.
    const auto refused = rpclb::detail::unsent("b@h", "m", "f");
    BOOST_TEST(refused.never_sent());
    BOOST_TEST_REQUIRE(!refused.result.has_value());
    BOOST_TEST(refused.result.error().is(rpclb::Failure::no_connection));
    BOOST_TEST(refused.result.error().message == "noconnection");
    BOOST_TEST(reason_of(refused.result.error()) == "not connected");

    // Queued, then the connection was lost: never picked again, whatever the details say.
    const auto lost = rpclb::detail::link_failure(LinkError::reset, "b@h", "m", "f");
    BOOST_TEST(reason_of(lost) == "connection lost");
    BOOST_TEST(!RequestOutcome(lost, LinkError::reset).never_sent());
    auto stripped = lost;
    stripped.details.erase("reason");  // without a reason detail it is still not "never sent"
    BOOST_TEST(!RequestOutcome(stripped, LinkError::reset).never_sent());
    BOOST_TEST(!RequestOutcome(stripped).never_sent());

    // A peer's answer that looks like a refusal (no_connection, no reason detail) is the
    // peer's: it ran there.
    auto from_peer = rpclb::ErrorMessage::from_json(boost::json::parse(
        R"({"code":"service_unavailable","message":"noconnection","details":{"node":"c@h"}})"));
    BOOST_TEST_REQUIRE(from_peer.has_value());
    from_peer->reason = rpclb::Failure::no_connection;
    BOOST_TEST(!RequestOutcome(*from_peer).never_sent());
    BOOST_TEST(!RequestOutcome(rpclb::CallResult(boost::json::value(1))).never_sent());
}

BOOST_AUTO_TEST_SUITE_END()
