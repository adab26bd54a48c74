// Declarations of the error and result types, for headers that only name them: a function
// that returns a Result<T> or takes an ErrorMessage can be declared with this header alone.
// Using their values needs <rpclb/error.hpp> (and Boost.JSON), which includes this one.
#pragma once

namespace boost::json {
class array;
class object;
class value;
}  // namespace boost::json

namespace boost::system {
template <class T, class E>
class result;
}  // namespace boost::system

namespace rpclb {

struct ErrorMessage;

/// The value-or-ErrorMessage that every data-path operation returns
/// (`boost::system::result`; defined by <rpclb/error.hpp>).
template <class T>
using Result = boost::system::result<T, ErrorMessage>;

/// Result of a call: the handler's JSON value or an ErrorMessage.
using CallResult = Result<boost::json::value>;

}  // namespace rpclb
