# SPDX-License-Identifier: Apache-2.0
"""Checks test_constrain_engine's outputs: each text must parse as JSON and validate against its
schema with Python's jsonschema (an implementation independent of servekit's matcher)."""
import json
import sys

import jsonschema

# Formats are asserted too; date-time, time and uri need the checkers' optional packages
# (rfc3339-validator, rfc3987: tools/server_venv.sh), without which jsonschema skips them.
FORMATS = ("date", "time", "date-time", "email", "uuid", "ipv4", "ipv6", "uri")
missing = [f for f in FORMATS if f not in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers]
if missing:
    sys.exit(f"jsonschema cannot check the formats {missing}: run tools/server_venv.sh")

data = json.load(open(sys.argv[1]))
schemas = data["schemas"]
bad = []
for out in data["outputs"]:
    schema = schemas[out["schema"]]
    try:
        value = json.loads(out["text"])
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
    except Exception as e:  # a parse error or a validation error: both are failures
        bad.append((out["schema"], out["text"], str(e).splitlines()[0]))
n = len(data["outputs"])
print(f"{n - len(bad)} of {n} outputs valid against their schemas ({len(schemas)} schemas)")
for s, text, why in bad[:20]:
    print(f"  schema {s}: {text!r}: {why}")
sys.exit(1 if bad or n < 600 else 0)
