// Typed functions and the conversions of typed calls (<rpclb/typed.hpp>), without a node:
// the Handler that typed() builds is called with JSON arrays directly.
#define BOOST_TEST_MODULE typed
#include <rpclb/typed.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace json = boost::json;

namespace inventory {

// A user type, converted through tag_invoke both ways.
struct Item {
    std::string sku;
    int qty = 0;
};

void tag_invoke(json::value_from_tag, json::value& v, const Item& item) {
    v = {{"sku", item.sku}, {"qty", item.qty}};
}

json::result<Item> tag_invoke(json::try_value_to_tag<Item>, const json::value& v) {
    const auto* o = v.if_object();
    if (!o) return json::make_error_code(json::error::not_object);
    const auto* sku = o->if_contains("sku");
    const auto* qty = o->if_contains("qty");
    if (!sku || !sku->is_string() || !qty || !qty->is_int64()) return json::make_error_code(json::error::size_mismatch);
    return Item{std::string(sku->get_string()), static_cast<int>(qty->get_int64())};
}

}  // namespace inventory

namespace {

json::array args(const char* text) { return json::parse(text).as_array(); }

rpclb::Handler reserve() {
    return rpclb::typed([](std::string sku, int qty) { return sku + ":" + std::to_string(qty); }, {"sku", "qty"});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(typed)

BOOST_AUTO_TEST_CASE(arguments_convert_to_the_parameter_types) {
    const auto r = reserve()(args(R"(["apple", 3])"));
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(json::serialize(*r) == R"("apple:3")");
}

BOOST_AUTO_TEST_CASE(wrong_type_names_the_argument_and_both_kinds) {
    const auto r = reserve()(args(R"(["apple", "three"])"));
    BOOST_REQUIRE(r.has_error());
    BOOST_TEST(static_cast<int>(r.error().code) == static_cast<int>(rpclb::ErrorCode::bad_request));
    BOOST_TEST(r.error().message == "argument 2 (qty): expected an integer, got string");
    BOOST_TEST(r.error().details.at("argument").as_int64() == 2);

    const auto first = reserve()(args(R"([1, 3])"));
    BOOST_TEST(first.error().message == "argument 1 (sku): expected a string, got integer");
}

BOOST_AUTO_TEST_CASE(every_kind_of_mismatch_is_named) {
    auto f = rpclb::typed([](bool, double, std::vector<int>, std::map<std::string, int>, std::uint16_t) { return 0; });
    BOOST_TEST(f(args(R"([1, 1.5, [], {}, 1])")).error().message == "argument 1: expected a boolean, got integer");
    BOOST_TEST(f(args(R"([true, "x", [], {}, 1])")).error().message == "argument 2: expected a number, got string");
    BOOST_TEST(f(args(R"([true, 1.5, {}, {}, 1])")).error().message == "argument 3: expected an array, got object");
    BOOST_TEST(f(args(R"([true, 1.5, [], [], 1])")).error().message == "argument 4: expected an object, got array");
    BOOST_TEST(f(args(R"([true, 1.5, [], {}, null])")).error().message ==
               "argument 5: expected a non-negative integer, got null");
    BOOST_TEST(f(args(R"([true, 1.5, [], {}, 70000])")).error().message ==
               "argument 5: expected a non-negative integer, got integer (out of range)");
    BOOST_TEST(f(args(R"([true, 1.5, [], {}, 2.5])")).error().message ==
               "argument 5: expected a non-negative integer, got number (not a whole number)");
    BOOST_TEST(f(args(R"([true, 1.5, [], {}, 2.0])")).has_value());  // a whole number converts
    BOOST_TEST(f(args(R"([true, 1.5, [1, "x"], {}, 1])")).error().message.starts_with("argument 3: "));
    BOOST_TEST(f(args(R"([true, 1.5, [1, 2], {"a": 1}, 1])")).has_value());
}

BOOST_AUTO_TEST_CASE(wrong_count_says_how_many_and_which) {
    const auto more = reserve()(args(R"(["apple", 3, 4])"));
    BOOST_TEST(static_cast<int>(more.error().code) == static_cast<int>(rpclb::ErrorCode::bad_request));
    BOOST_TEST(more.error().message == "expected 2 arguments (sku, qty), got 3");
    BOOST_TEST(reserve()(args("[]")).error().message == "expected 2 arguments (sku, qty), got 0");
    auto unnamed = rpclb::typed([](int) {});
    BOOST_TEST(unnamed(args("[]")).error().message == "expected 1 argument, got 0");
}

BOOST_AUTO_TEST_CASE(trailing_optionals_may_be_left_out) {
    auto f = rpclb::typed([](int a, std::optional<int> b) { return a + b.value_or(100); }, {"a", "b"});
    BOOST_TEST(f(args("[1]")).value().as_int64() == 101);
    BOOST_TEST(f(args("[1, 2]")).value().as_int64() == 3);
    BOOST_TEST(f(args("[1, null]")).value().as_int64() == 101);
    BOOST_TEST(f(args("[]")).error().message == "expected 1 to 2 arguments (a, b), got 0");
    BOOST_TEST(f(args(R"([1, "x"])")).error().message == "argument 2 (b): expected an integer or null, got string");
}

BOOST_AUTO_TEST_CASE(user_type_converts_through_tag_invoke_both_ways) {
    auto f = rpclb::typed([](inventory::Item item) { return inventory::Item{item.sku, item.qty * 2}; }, {"item"});
    const auto r = f(args(R"([{"sku": "apple", "qty": 2}])"));
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->at("qty").as_int64() == 4);
    BOOST_TEST(r->at("sku").as_string() == "apple");

    const auto bad = f(args(R"([{"sku": "apple"}])"));
    BOOST_REQUIRE(bad.has_error());
    BOOST_TEST(bad.error().message.starts_with("argument 1 (item): expected inventory::Item, got object"));
    BOOST_TEST(f(args("[5]")).error().message == "argument 1 (item): expected inventory::Item, got integer");
}

BOOST_AUTO_TEST_CASE(void_returns_null_and_result_passes_its_error_through) {
    int seen = 0;
    auto v = rpclb::typed([&seen](int x) { seen = x; });
    BOOST_TEST(v(args("[7]")).value().is_null());
    BOOST_TEST(seen == 7);

    auto checked = rpclb::typed([](int qty) -> rpclb::Result<int> {
        if (qty <= 0) return rpclb::ErrorMessage{rpclb::ErrorCode::bad_request, "qty must be positive", {}, {}};
        return qty;
    });
    BOOST_TEST(checked(args("[3]")).value().as_int64() == 3);
    BOOST_TEST(checked(args("[0]")).error().message == "qty must be positive");

    auto nothing = rpclb::typed([]() -> rpclb::Result<void> { return {}; });
    BOOST_TEST(nothing(args("[]")).value().is_null());
}

BOOST_AUTO_TEST_CASE(exception_leaves_the_handler_as_for_a_json_handler) {
    // The node turns it into internal_server_error with the text (as for any Handler).
    auto f = rpclb::typed([](int) -> int { throw std::runtime_error("out of stock"); });
    BOOST_CHECK_THROW(f(args("[1]")), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(names_must_match_the_parameters) {
    BOOST_CHECK_THROW(rpclb::typed([](int, int) {}, {"only_one"}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(arguments_and_answers_convert_for_typed_calls) {
    BOOST_TEST(json::serialize(rpclb::detail::to_arguments(std::string("apple"), 3, inventory::Item{"pear", 1})) ==
               R"(["apple",3,{"sku":"pear","qty":1}])");

    const rpclb::CallResult three = json::value(3);
    BOOST_TEST(rpclb::detail::reply_of<int>(three, "b@h", "inventory", "reserve").value() == 3);
    const auto reply = rpclb::detail::reply_of<rpclb::Reply<int>>(three, "b@h", "inventory", "reserve");
    BOOST_TEST(reply->value == 3);
    BOOST_TEST(reply->node == "b@h");
    BOOST_TEST(rpclb::detail::reply_of<void>(three, "b@h", "inventory", "reserve").has_value());

    const auto wrong = rpclb::detail::reply_of<std::string>(three, "b@h", "inventory", "reserve");
    BOOST_REQUIRE(wrong.has_error());
    BOOST_TEST(wrong.error().is(rpclb::Failure::bad_reply));
    BOOST_TEST(static_cast<int>(wrong.error().code) == static_cast<int>(rpclb::ErrorCode::internal_server_error));
    BOOST_TEST(wrong.error().message == "answer: expected a string, got integer");
    BOOST_TEST(wrong.error().details.at("node").as_string() == "b@h");
    BOOST_TEST(wrong.error().details.at("function").as_string() == "reserve");

    const rpclb::CallResult failed = rpclb::ErrorMessage{rpclb::ErrorCode::not_found, "no such function", {}, {}};
    BOOST_TEST(rpclb::detail::reply_of<int>(failed, "b@h", "m", "f").error().message == "no such function");
}

BOOST_AUTO_TEST_SUITE_END()
