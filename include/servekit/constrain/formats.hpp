// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON schema's string formats as patterns (constrain/pattern.hpp), each matching only valid
// strings of its format: where the format's full language does not fit a pattern's 63
// positions, a subset of it that does (years 1000-9999; no February 29th; IPv6 written out in
// eight groups, without "::"; URIs of the scheme://host/path form), so that what is generated
// is always valid, if not every valid string can be.
#include <string>
#include <string_view>

namespace servekit::constrain {

inline constexpr const char* kFormatNames = "date, time, date-time, email, uuid, ipv4, ipv6, uri";

// The pattern of a format, or nullptr if servekit has none.
inline const char* format_pattern(std::string_view name) {
#define SERVEKIT_DATE                                                                             \
  "[1-9]\\d{3}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-" \
  "9]|1\\d|2[0-8]))"
#define SERVEKIT_TIME \
  "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
  if (name == "date") return "^" SERVEKIT_DATE "$";
  if (name == "time") return "^" SERVEKIT_TIME "$";
  if (name == "date-time") return "^" SERVEKIT_DATE "T" SERVEKIT_TIME "$";
#undef SERVEKIT_DATE
#undef SERVEKIT_TIME
  if (name == "email")
    return "^[a-zA-Z0-9_%+-]+(\\.[a-zA-Z0-9_%+-]+)*@[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*"
           "(\\.[a-zA-Z0-9]+(-[a-zA-Z0-9]+)*)*\\.[a-zA-Z]{2,}$";
  if (name == "uuid")
    return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (name == "ipv4")
    return "^(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)(\\.(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)){3}$";
  if (name == "ipv6") return "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$";
  if (name == "uri")
    return "^[a-z][a-z0-9+.-]*://[a-zA-Z0-9-]+(\\.[a-zA-Z0-9-]+)*(/"
           "[a-zA-Z0-9._~!$&'()*+,;=:@-]*)*$";
  return nullptr;
}

}  // namespace servekit::constrain
