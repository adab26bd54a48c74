// HOST:PORT text: split, port range, and IPv6 endpoints written in brackets so that they
// read back.
#define BOOST_TEST_MODULE host_port
#include <boost/test/unit_test.hpp>

#include <rpclb/detail/host_port.hpp>

using rpclb::detail::parse_port;
using rpclb::detail::split_host_port;
using rpclb::detail::to_host_port;
using tcp = boost::asio::ip::tcp;

BOOST_AUTO_TEST_SUITE(host_port)

BOOST_AUTO_TEST_CASE(splits_at_the_last_colon_and_drops_ipv6_brackets) {
    const auto v4 = split_host_port("127.0.0.1:4370");
    BOOST_TEST_REQUIRE(v4.has_value());
    BOOST_TEST(v4->host == "127.0.0.1");
    BOOST_TEST(v4->port == "4370");
    const auto v6 = split_host_port("[::1]:4370");
    BOOST_TEST_REQUIRE(v6.has_value());
    BOOST_TEST(v6->host == "::1");
    BOOST_TEST(v6->port == "4370");
    const auto name = split_host_port("node.example:http");
    BOOST_TEST_REQUIRE(name.has_value());
    BOOST_TEST(name->host == "node.example");
    BOOST_TEST(name->port == "http");
}

BOOST_AUTO_TEST_CASE(refuses_text_without_a_host_or_a_colon) {
    BOOST_TEST(!split_host_port("nonsense").has_value());
    BOOST_TEST(!split_host_port(":4370").has_value());
    BOOST_TEST(!split_host_port("").has_value());
}

BOOST_AUTO_TEST_CASE(ports_are_decimal_and_at_most_65535) {
    BOOST_TEST(parse_port("0").value() == 0);
    BOOST_TEST(parse_port("65535").value() == 65535);
    BOOST_TEST(!parse_port("65536").has_value());
    BOOST_TEST(!parse_port("99999").has_value());
    BOOST_TEST(!parse_port("").has_value());
    BOOST_TEST(!parse_port("123456").has_value());
    BOOST_TEST(!parse_port("-1").has_value());
    BOOST_TEST(!parse_port("80a").has_value());
}

BOOST_AUTO_TEST_CASE(ipv6_endpoints_are_written_in_brackets_and_read_back) {
    const tcp::endpoint v6(boost::asio::ip::make_address("::1"), 4370);
    BOOST_TEST(to_host_port(v6) == "[::1]:4370");
    const auto back = split_host_port(to_host_port(v6));
    BOOST_TEST_REQUIRE(back.has_value());
    BOOST_TEST(back->host == "::1");
    const tcp::endpoint v4(boost::asio::ip::make_address("10.0.0.7"), 80);
    BOOST_TEST(to_host_port(v4) == "10.0.0.7:80");
}

BOOST_AUTO_TEST_SUITE_END()
