"""Validates custom resources in rendered manifests against the
CustomResourceDefinitions in crds/ (their openAPIV3Schema), strictly: an
object property the schema does not list is an error, as with
`kubernetes-validate --strict` for built-in kinds.

    python crd_validate.py FILE...

Objects of other kinds are left to kubernetes-validate. Exit 1 on any error.
"""

import copy
import sys
from pathlib import Path

import jsonschema
import yaml

CRD_DIR = Path(__file__).with_name("crds")


def strict(schema):
    """The schema with additionalProperties: false wherever an object lists
    its properties and does not keep unknown fields."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    return s


def schemas():
    """(apiVersion, kind) to the strict schema of that version."""
    out = {}
    for f in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schema = strict(v["schema"]["openAPIV3Schema"])
            # metadata is the API server's ObjectMeta, checked by it.
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            out[(f"{group}/{v['name']}", kind)] = schema
    return out


def main(files):
    known = schemas()
    errors = checked = 0
    for f in files:
        for doc in yaml.safe_load_all(Path(f).read_text()):
            if not doc:
                continue
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key not in known:
                continue
            checked += 1
            name = f"{key[1]}/{doc.get('metadata', {}).get('name')}"
            validator = jsonschema.Draft7Validator(known[key])
            found = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            for e in found:
                path = ".".join(str(p) for p in e.path)
                print(f"ERROR {f} {name} {path}: {e.message}")
            errors += len(found)
            if not found:
                print(f"INFO {f} {name} passed against {key[0]} {key[1]} (crds/)")
    print(f"crd-validate: {checked} custom resources, {errors} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
