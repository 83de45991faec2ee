// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JSON schemas the structured-generation benchmarks constrain to (bench/constrain.cpp,
// bench/mask_steps.hpp): the shapes people ask for, a record, a nested record, a list of
// records, any object.
namespace servekit::bench {

inline const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"}}, "required": ["name", "age"]})",
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]},
        "tags": {"type": "array", "items": {"enum": ["new", "vip", "late"]}, "maxItems": 3}},
        "required": ["name", "address"]})",
    R"({"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string",
        "pattern": "^[A-Z]{3}-[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
        "required": ["sku", "qty"]}, "minItems": 1, "maxItems": 4})",
    R"({"type": "object"})"};

}  // namespace servekit::bench
