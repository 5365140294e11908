#!/usr/bin/env python3
"""Turns an upstream CRD manifest into the JSON schema scripts/chart_check.py validates with.

    python3 deploy/crds/convert.py CRD.yaml VERSION OUT.json

Takes `spec.versions[name=VERSION].schema.openAPIV3Schema` and makes it a plain JSON schema the
way the API server reads it under strict field validation (`kubectl apply` defaults to
`--validate=strict` since Kubernetes 1.27; unknown fields are then errors, not pruned):

- every object schema with `properties` and neither `additionalProperties` nor
  `x-kubernetes-preserve-unknown-fields: true` gets `additionalProperties: false`;
- `x-kubernetes-int-or-string: true` becomes `anyOf: [integer, string]`;
- `nullable: true` adds "null" to the type;
- `metadata` (which a CRD schema leaves open) is given the ObjectMeta fields a chart sets;
- descriptions are dropped (they are most of the bytes and never validate anything).
Needs PyYAML."""
import json
import sys

import yaml

META = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 253},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def strict(s):
    if isinstance(s, list):
        return [strict(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: strict(v) for k, v in s.items() if k != "description"}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def main():
    src, version, dst = sys.argv[1:4]
    with open(src) as f:
        crd = yaml.safe_load(f)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = strict(ver["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = META
    schema["properties"]["apiVersion"] = {"const": f"{group}/{version}"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
    doc = {"$schema": "http://json-schema.org/draft-07/schema#",
           "title": f"{kind} ({group}/{version})", **schema}
    with open(dst, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
