#define BOOST_TEST_MODULE handshake
#include <boost/test/unit_test.hpp>

#include <rpclb/detail/handshake.hpp>

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace proto = rpclb::detail::wire;
using rpclb::detail::Handshake;
using rpclb::detail::Role;

namespace {

const proto::PeerInfo dialer_info{"dialer@host", "inc-d", "", true};
const proto::PeerInfo acceptor_info{"acceptor@host", "inc-a", "127.0.0.1:4369", false};

// Sends a frame through the codec, as the connection does, and records its text.
proto::Frame through_wire(const proto::Frame& frame, std::vector<std::string>& texts) {
    texts.push_back(proto::encode(frame));
    auto decoded = proto::decode(texts.back());
    BOOST_TEST_REQUIRE(decoded.has_value(), texts.back() << ": " << decoded.error().message);
    return std::move(*decoded);
}

struct Outcome {
    bool dialer_done = false;
    bool acceptor_done = false;
    std::optional<std::string> dialer_error;
    std::optional<std::string> acceptor_error;
    std::vector<std::string> texts;  // every encoded frame, both directions
};

// Drives both sides against each other until neither has anything to send.
Outcome run(Handshake& dialer, Handshake& acceptor) {
    Outcome out;
    std::deque<proto::Frame> to_acceptor;
    std::deque<proto::Frame> to_dialer;
    auto absorb = [](Handshake::Step step, std::deque<proto::Frame>& queue, bool& done,
                     std::optional<std::string>& error) {
        for (auto& f : step.send) queue.push_back(std::move(f));
        done = done || step.done;
        if (step.error) error = step.error;
    };
    absorb(dialer.start(), to_acceptor, out.dialer_done, out.dialer_error);
    absorb(acceptor.start(), to_dialer, out.acceptor_done, out.acceptor_error);
    for (int rounds = 0; rounds < 20 && (!to_acceptor.empty() || !to_dialer.empty()); ++rounds) {
        if (out.dialer_error || out.acceptor_error) break;
        if (!to_acceptor.empty()) {
            auto f = through_wire(to_acceptor.front(), out.texts);
            to_acceptor.pop_front();
            absorb(acceptor.on_frame(f), to_dialer, out.acceptor_done, out.acceptor_error);
        }
        if (!to_dialer.empty() && !out.acceptor_error) {
            auto f = through_wire(to_dialer.front(), out.texts);
            to_dialer.pop_front();
            absorb(dialer.on_frame(f), to_acceptor, out.dialer_done, out.dialer_error);
        }
    }
    return out;
}

proto::Hello dialer_hello(std::string nonce) {
    return proto::Hello{proto::protocol_version, dialer_info, std::move(nonce)};
}

const std::string nonce_d(64, 'd');
const std::string nonce_a(64, 'a');

// The proofs exactly as the header documents them.
std::string documented_dialer_proof(const std::string& cookie, const std::string& na,
                                    const std::string& nd) {
    return rpclb::detail::hmac_sha256_hex(
        cookie, "rpclb-dialer\n" + na + "\n" + nd + "\n" + dialer_info.node + "\n" + acceptor_info.node);
}

std::string documented_acceptor_proof(const std::string& cookie, const std::string& nd,
                                      const std::string& na) {
    return rpclb::detail::hmac_sha256_hex(
        cookie, "rpclb-acceptor\n" + nd + "\n" + na + "\n" + acceptor_info.node + "\n" + dialer_info.node);
}

bool contains(const std::optional<std::string>& s, std::string_view part) {
    return s && s->find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(handshake)

BOOST_AUTO_TEST_CASE(hmac_matches_rfc_4231) {
    // RFC 4231 test case 2.
    BOOST_TEST(rpclb::detail::hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // RFC 4231 test case 1.
    BOOST_TEST(rpclb::detail::hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    // Empty key and message (Python's hmac module gives the same).
    BOOST_TEST(rpclb::detail::hmac_sha256_hex("", "") ==
               "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

BOOST_AUTO_TEST_CASE(constant_time_equal_compares_content_and_length) {
    using rpclb::detail::constant_time_equal;
    BOOST_TEST(constant_time_equal("abc", "abc"));
    BOOST_TEST(constant_time_equal("", ""));
    BOOST_TEST(!constant_time_equal("abc", "abd"));
    BOOST_TEST(!constant_time_equal("abc", "abcd"));
    BOOST_TEST(!constant_time_equal("abc", ""));
}

BOOST_AUTO_TEST_CASE(make_nonce_is_fresh_64_hex_digits) {
    const auto a = rpclb::detail::make_nonce();
    const auto b = rpclb::detail::make_nonce();
    BOOST_TEST(a.size() == 64u);
    BOOST_TEST(a.find_first_not_of("0123456789abcdef") == std::string::npos);
    BOOST_TEST(a != b);
}

BOOST_AUTO_TEST_CASE(right_cookie_completes_both_sides) {
    Handshake dialer(Role::dialer, dialer_info, "cookie");
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    const auto out = run(dialer, acceptor);
    BOOST_TEST(!out.dialer_error.has_value());
    BOOST_TEST(!out.acceptor_error.has_value());
    BOOST_TEST(out.dialer_done);
    BOOST_TEST(out.acceptor_done);
    BOOST_TEST((dialer.peer() == acceptor_info));
    BOOST_TEST((acceptor.peer() == dialer_info));
    BOOST_TEST((dialer.role() == Role::dialer));
    BOOST_TEST((acceptor.role() == Role::acceptor));
    BOOST_TEST(dialer.dialer_nonce() == acceptor.dialer_nonce());
    // hello, hello, auth, ready
    BOOST_TEST_REQUIRE(out.texts.size() == 4u);
    BOOST_TEST(out.texts[0].find(R"("t":"hello")") != std::string::npos, out.texts[0]);
    BOOST_TEST(out.texts[1].find(R"("t":"hello")") != std::string::npos, out.texts[1]);
    BOOST_TEST(out.texts[2].find(R"("t":"auth")") != std::string::npos, out.texts[2]);
    BOOST_TEST(out.texts[3].find(R"("t":"ready")") != std::string::npos, out.texts[3]);
    // Only Auth and Ready carry proofs.
    BOOST_TEST(out.texts[0].find("proof") == std::string::npos, out.texts[0]);
    BOOST_TEST(out.texts[1].find("proof") == std::string::npos, out.texts[1]);
}

BOOST_AUTO_TEST_CASE(start_sends_hello_only_from_dialer) {
    Handshake dialer(Role::dialer, dialer_info, "cookie");
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    const auto d = dialer.start();
    BOOST_TEST_REQUIRE(d.send.size() == 1u);
    const auto& hello = std::get<proto::Hello>(d.send[0]);
    BOOST_TEST(proto::encode(hello).find("proof") == std::string::npos);
    BOOST_TEST((hello.peer == dialer_info));
    BOOST_TEST(hello.version == proto::protocol_version);
    const auto a = acceptor.start();
    BOOST_TEST(a.send.empty());
    BOOST_TEST(!a.done);
    BOOST_TEST(!a.error.has_value());
}

BOOST_AUTO_TEST_CASE(acceptor_hello_carries_no_proof) {
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    acceptor.start();
    const auto step = acceptor.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(!step.error.has_value(), step.error.value_or(""));
    BOOST_TEST(!step.done);
    BOOST_TEST_REQUIRE(step.send.size() == 1u);
    const auto& hello = std::get<proto::Hello>(step.send[0]);
    BOOST_TEST((hello.peer == acceptor_info));
    BOOST_TEST(hello.version == proto::protocol_version);
    const auto text = proto::encode(hello);
    BOOST_TEST(text.find("proof") == std::string::npos, text);
    // Nothing in it is an HMAC under the cookie: only the fresh nonce and the identity.
    BOOST_TEST(text.find(documented_acceptor_proof("cookie", nonce_d, hello.nonce)) == std::string::npos);
    BOOST_TEST(acceptor.dialer_nonce() == nonce_d);
}

BOOST_AUTO_TEST_CASE(wrong_cookie_is_detected_by_acceptor_first) {
    Handshake dialer(Role::dialer, dialer_info, "cookie-one");
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie-two");
    const auto out = run(dialer, acceptor);
    BOOST_TEST(out.acceptor_error.value_or("<no error>") ==
                   "wrong cookie: " + dialer_info.node + " failed the cookie check");
    // The dialer is still waiting for Ready, which never comes.
    BOOST_TEST(!out.dialer_error.has_value());
    BOOST_TEST(!out.dialer_done);
    BOOST_TEST(!out.acceptor_done);
    // hello, hello, auth: no ready, and no acceptor proof anywhere.
    BOOST_TEST(out.texts.size() == 3u);
    for (const auto& text : out.texts) BOOST_TEST(text.find("ready") == std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(acceptor_sends_nothing_to_a_dialer_that_failed) {
    // A dialer answering with a proof made from another cookie.
    Handshake acceptor(Role::acceptor, acceptor_info, "right-cookie");
    acceptor.start();
    auto step = acceptor.on_frame(dialer_hello(nonce_d));
    BOOST_TEST_REQUIRE(step.send.size() == 1u);
    const auto na = std::get<proto::Hello>(step.send[0]).nonce;
    step = acceptor.on_frame(proto::Auth{documented_dialer_proof("wrong-cookie", na, nonce_d)});
    BOOST_TEST(step.error.value_or("<no error>") ==
               "wrong cookie: " + dialer_info.node + " failed the cookie check");
    // Marked as a cookie mismatch, which the connection tells the dialer in its close.
    BOOST_TEST(step.wrong_cookie);
    BOOST_TEST(!step.done);
    BOOST_TEST(step.send.empty());
    // Nor does it answer anything afterwards, even the right proof.
    step = acceptor.on_frame(proto::Auth{documented_dialer_proof("right-cookie", na, nonce_d)});
    BOOST_TEST(step.error.has_value());
    BOOST_TEST(step.send.empty());
    BOOST_TEST(!step.done);

    // An empty or a junk proof fails the same way.
    for (const auto& bad : {std::string(), std::string("00")}) {
        Handshake a(Role::acceptor, acceptor_info, "right-cookie");
        a.start();
        a.on_frame(dialer_hello(nonce_d));
        const auto s = a.on_frame(proto::Auth{bad});
        BOOST_TEST(contains(s.error, "wrong cookie"), s.error.value_or("<no error>"));
        BOOST_TEST(s.send.empty());
    }
}

BOOST_AUTO_TEST_CASE(dialer_facing_wrong_cookie_acceptor_fails_at_ready) {
    // An impostor acceptor that does not hold the cookie but answers Ready anyway: with
    // an empty proof, a junk proof, or a proper HMAC under its own cookie.
    for (int attempt = 0; attempt < 3; ++attempt) {
        Handshake dialer(Role::dialer, dialer_info, "cookie");
        const auto d = dialer.start();
        const auto nd = std::get<proto::Hello>(d.send.at(0)).nonce;
        auto step = dialer.on_frame(proto::Hello{proto::protocol_version, acceptor_info, nonce_a});
        BOOST_TEST(!step.error.has_value(), step.error.value_or(""));
        BOOST_TEST(!step.done);
        BOOST_TEST_REQUIRE(step.send.size() == 1u);
        BOOST_TEST(std::holds_alternative<proto::Auth>(step.send[0]));
        const std::string proof = attempt == 0   ? std::string()
                                  : attempt == 1 ? std::string(64, '0')
                                                 : documented_acceptor_proof("impostor-cookie", nd, nonce_a);
        step = dialer.on_frame(proto::Ready{proof});
        BOOST_TEST(step.error.value_or("<no error>") ==
                   "wrong cookie: " + acceptor_info.node + " failed the cookie check");
        BOOST_TEST(!step.done);
        BOOST_TEST(step.send.empty());
    }

    // Nor is the dialer's own proof reflected back as the acceptor's.
    Handshake dialer(Role::dialer, dialer_info, "cookie");
    dialer.start();
    const auto step = dialer.on_frame(proto::Hello{proto::protocol_version, acceptor_info, nonce_a});
    const auto own = std::get<proto::Auth>(step.send.at(0)).proof;
    const auto reflected = dialer.on_frame(proto::Ready{own});
    BOOST_TEST(contains(reflected.error, "wrong cookie"), reflected.error.value_or("<no error>"));
    BOOST_TEST(!reflected.done);
}

BOOST_AUTO_TEST_CASE(proofs_follow_documented_formula) {
    const std::string cookie = "shared";
    // Acceptor side: the dialer's Auth is checked against the dialer formula and Ready
    // carries the acceptor formula.
    Handshake acceptor(Role::acceptor, acceptor_info, cookie);
    acceptor.start();
    auto step = acceptor.on_frame(dialer_hello(nonce_d));
    BOOST_TEST_REQUIRE(step.send.size() == 1u);
    const auto na = std::get<proto::Hello>(step.send[0]).nonce;
    step = acceptor.on_frame(proto::Auth{documented_dialer_proof(cookie, na, nonce_d)});
    BOOST_TEST(!step.error.has_value(), step.error.value_or(""));
    BOOST_TEST(step.done);
    BOOST_TEST_REQUIRE(step.send.size() == 1u);
    const auto* ready = std::get_if<proto::Ready>(&step.send[0]);
    BOOST_TEST_REQUIRE(ready != nullptr);
    BOOST_TEST(ready->proof == documented_acceptor_proof(cookie, nonce_d, na));

    // Dialer side: Auth carries the dialer formula and Ready is checked against the
    // acceptor formula.
    Handshake dialer(Role::dialer, dialer_info, cookie);
    const auto d = dialer.start();
    const auto nd = std::get<proto::Hello>(d.send.at(0)).nonce;
    step = dialer.on_frame(proto::Hello{proto::protocol_version, acceptor_info, nonce_a});
    BOOST_TEST_REQUIRE(step.send.size() == 1u);
    const auto* auth = std::get_if<proto::Auth>(&step.send[0]);
    BOOST_TEST_REQUIRE(auth != nullptr);
    BOOST_TEST(auth->proof == documented_dialer_proof(cookie, nonce_a, nd));
    BOOST_TEST(dialer.dialer_nonce() == nd);
    step = dialer.on_frame(proto::Ready{documented_acceptor_proof(cookie, nd, nonce_a)});
    BOOST_TEST(!step.error.has_value(), step.error.value_or(""));
    BOOST_TEST(step.done);
    BOOST_TEST(step.send.empty());
}

BOOST_AUTO_TEST_CASE(acceptor_ignores_proof_in_dialer_hello) {
    // Older peers put a "proof" member in Hello; it is ignored like any unknown member.
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    acceptor.start();
    auto text = proto::encode(dialer_hello(nonce_d));
    text.insert(text.size() - 1, R"(,"proof":"ffff")");
    const auto frame = proto::decode(text);
    BOOST_TEST_REQUIRE(frame.has_value(), text);
    const auto step = acceptor.on_frame(*frame);
    BOOST_TEST(!step.error.has_value());
    BOOST_TEST(step.send.size() == 1u);
}

BOOST_AUTO_TEST_CASE(cookie_never_appears_on_the_wire) {
    const std::string cookie = "very-secret-cookie-0123";
    for (auto acceptor_cookie : {cookie, std::string("other")}) {
        Handshake dialer(Role::dialer, dialer_info, cookie);
        Handshake acceptor(Role::acceptor, acceptor_info, acceptor_cookie);
        const auto out = run(dialer, acceptor);
        BOOST_TEST(!out.texts.empty());
        for (const auto& text : out.texts)
            BOOST_TEST(text.find(cookie) == std::string::npos, text);
    }
}

BOOST_AUTO_TEST_CASE(nonces_differ_between_handshakes) {
    std::vector<std::string> nonces;
    for (int i = 0; i < 3; ++i) {
        Handshake dialer(Role::dialer, dialer_info, "cookie");
        Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
        auto d = dialer.start();
        acceptor.start();
        const auto& dh = std::get<proto::Hello>(d.send.at(0));
        auto a = acceptor.on_frame(dh);
        const auto& ah = std::get<proto::Hello>(a.send.at(0));
        BOOST_TEST(dh.nonce != ah.nonce);
        nonces.push_back(dh.nonce);
        nonces.push_back(ah.nonce);
    }
    for (std::size_t i = 0; i < nonces.size(); ++i)
        for (std::size_t j = i + 1; j < nonces.size(); ++j) BOOST_TEST(nonces[i] != nonces[j]);
}

BOOST_AUTO_TEST_CASE(version_mismatch_fails) {
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    acceptor.start();
    auto hello = dialer_hello(nonce_d);
    hello.version = 2;
    auto step = acceptor.on_frame(hello);
    BOOST_TEST(step.error.value_or("<no error>") == "protocol version 2, expected 1");
    BOOST_TEST(!step.wrong_cookie);  // only a failed proof is a cookie mismatch
    BOOST_TEST(step.send.empty());

    Handshake dialer(Role::dialer, dialer_info, "cookie");
    dialer.start();
    step = dialer.on_frame(proto::Hello{7, acceptor_info, nonce_a});
    BOOST_TEST(step.error.value_or("<no error>") == "protocol version 7, expected 1");
    BOOST_TEST(!step.done);
}

BOOST_AUTO_TEST_CASE(unexpected_frame_fails) {
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    acceptor.start();
    auto step = acceptor.on_frame(proto::Request{1, "m", "f", {}, ""});
    BOOST_TEST(step.error.value_or("<no error>") == "unexpected req frame during handshake");

    // The dialer awaits the acceptor's Hello, not Ready.
    Handshake dialer(Role::dialer, dialer_info, "cookie");
    dialer.start();
    step = dialer.on_frame(proto::Ready{});
    BOOST_TEST(step.error.value_or("<no error>") == "unexpected ready frame during handshake");

    // The acceptor awaits Auth after its Hello; a second Hello is out of order.
    Handshake acceptor2(Role::acceptor, acceptor_info, "cookie");
    acceptor2.start();
    acceptor2.on_frame(dialer_hello(nonce_d));
    step = acceptor2.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(step.error.value_or("<no error>") == "unexpected hello frame during handshake");
    BOOST_TEST(!step.done);
}

BOOST_AUTO_TEST_CASE(frames_after_completion_or_failure_fail) {
    Handshake dialer(Role::dialer, dialer_info, "cookie");
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    const auto out = run(dialer, acceptor);
    BOOST_TEST_REQUIRE(out.dialer_done);
    BOOST_TEST_REQUIRE(out.acceptor_done);
    BOOST_TEST(dialer.on_frame(proto::Ready{}).error.has_value());
    BOOST_TEST(acceptor.on_frame(proto::Auth{"x"}).error.has_value());
    // Not even a fresh, well-formed Hello restarts a finished handshake.
    Handshake acceptor2(Role::acceptor, acceptor_info, "cookie");
    Handshake dialer2(Role::dialer, dialer_info, "cookie");
    BOOST_TEST_REQUIRE(run(dialer2, acceptor2).acceptor_done);
    const auto again = acceptor2.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(again.error.has_value());
    BOOST_TEST(again.send.empty());

    Handshake failed(Role::acceptor, acceptor_info, "cookie");
    failed.start();
    BOOST_TEST(failed.on_frame(proto::Ready{}).error.has_value());
    // Even the frame that would have been right is refused now.
    const auto step = failed.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(step.error.has_value());
    BOOST_TEST(step.send.empty());
}

BOOST_AUTO_TEST_CASE(frame_before_start_fails) {
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    const auto step = acceptor.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(step.error.has_value());
    BOOST_TEST(step.send.empty());
}

BOOST_AUTO_TEST_CASE(malformed_nonce_or_node_fails) {
    for (const auto& nonce : {std::string(), std::string("abc"), std::string(63, 'a') + "\n",
                              std::string(64, 'A')}) {
        Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
        acceptor.start();
        const auto step = acceptor.on_frame(dialer_hello(nonce));
        BOOST_TEST(contains(step.error, "nonce"), step.error.value_or("<no error>"));
        BOOST_TEST(step.send.empty());
    }
    Handshake acceptor(Role::acceptor, acceptor_info, "cookie");
    acceptor.start();
    auto hello = dialer_hello(nonce_d);
    hello.peer.node = "a\nb";
    BOOST_TEST(acceptor.on_frame(hello).error.has_value());
}

// A connection reads at most max_handshake_message per message until its handshake is
// done: every handshake frame must fit with a wide margin, even between nodes with long
// names (a 200-character short name on a 253-character host name, the longest DNS name)
// that set every optional flag.
BOOST_AUTO_TEST_CASE(handshake_frames_fit_the_preauthentication_limit) {
    const std::string host(253, 'h');
    const proto::PeerInfo long_dialer{std::string(200, 'd') + "@" + host, std::string(64, 'i'), host + ":65535", false};
    const proto::PeerInfo long_acceptor{std::string(200, 'a') + "@" + host, std::string(64, 'j'), host + ":65535",
                                        false};
    Handshake dialer(Role::dialer, long_dialer, "cookie", true, true);
    Handshake acceptor(Role::acceptor, long_acceptor, "cookie", true);
    const auto out = run(dialer, acceptor);
    BOOST_TEST_REQUIRE((out.dialer_done && out.acceptor_done));
    BOOST_TEST_REQUIRE(out.texts.size() == 4u);
    for (const auto& text : out.texts)
        BOOST_TEST(4 * text.size() <= rpclb::detail::max_handshake_message, text.size() << " bytes: " << text);
}

BOOST_AUTO_TEST_SUITE_END()

// Call channels (wire::Hello::channels / channel): each side learns that the other accepts
// channels, and only the acceptor learns that this connection is one.
BOOST_AUTO_TEST_CASE(the_hellos_carry_the_call_channel_flags) {
    Handshake dialer(Role::dialer, dialer_info, "secret", false, true);
    Handshake acceptor(Role::acceptor, acceptor_info, "secret");
    const auto out = run(dialer, acceptor);
    BOOST_TEST_REQUIRE((out.dialer_done && out.acceptor_done));
    BOOST_TEST(dialer.peer_channels());
    BOOST_TEST(acceptor.peer_channels());
    BOOST_TEST(acceptor.peer_channel());
    BOOST_TEST(!dialer.peer_channel());
    BOOST_TEST(out.texts.front().find("\"channel\":true") != std::string::npos, out.texts.front());

    Handshake link_dialer(Role::dialer, dialer_info, "secret");
    Handshake link_acceptor(Role::acceptor, acceptor_info, "secret");
    BOOST_TEST_REQUIRE(run(link_dialer, link_acceptor).acceptor_done);
    BOOST_TEST(!link_acceptor.peer_channel());
    // A Hello from a version without channels says nothing of them.
    Handshake old_peer(Role::acceptor, acceptor_info, "secret");
    old_peer.start();
    old_peer.on_frame(dialer_hello(nonce_d));
    BOOST_TEST(!old_peer.peer_channels());
}
