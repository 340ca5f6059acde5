"""Regenerate the vendored schemas in this folder (see README.md for sources and versions).

    python infra/schemas/vendor.py KUBERAY_GIT_DIR KUBERNETES_VALIDATE_WHEEL

KUBERAY_GIT_DIR is a clone of github.com/ray-project/kuberay (the tag is read with `git show`);
KUBERNETES_VALIDATE_WHEEL is the kubernetes-validate wheel from PyPI, whose `local-strict` schemas
are made standalone here (every $ref resolved into the file's own $defs).
Descriptions are dropped to keep the files small; nothing that validation reads is changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

KUBERAY_TAG = "v1.6.2"
KUBERNETES_VERSION = "v1.33.0"
CRDS = ("rayclusters", "rayjobs", "raycronjobs")
# the kinds infra/k8s uses, by their file names in kubernetes-validate
KUBERNETES_KINDS = ("cronjob-batch-v1", "serviceaccount-v1", "role-rbac-v1", "rolebinding-rbac-v1", "configmap-v1", "secret-v1",
                    "namespace-v1", "persistentvolumeclaim-v1")
# CRD schemas leave metadata as a bare object; the tests validate it with the real ObjectMeta.
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
HERE = Path(__file__).resolve().parent


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def write(path: Path, schema: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(strip_descriptions(schema), sort_keys=True, separators=(",", ":")) + "\n")


def vendor_crds(kuberay_git: Path) -> None:
    for name in CRDS:
        text = subprocess.run(["git", "-C", str(kuberay_git), "show", f"{KUBERAY_TAG}:ray-operator/config/crd/bases/ray.io_{name}.yaml"],
                              check=True, capture_output=True, text=True).stdout
        crd = yaml.safe_load(text)
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        schema = version["schema"]["openAPIV3Schema"]
        schema["x-crd"] = {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": "v1",
                           "source": f"ray-project/kuberay@{KUBERAY_TAG}:ray-operator/config/crd/bases/ray.io_{name}.yaml"}
        write(HERE / f"kuberay-{KUBERAY_TAG}" / f"{name}.json", schema)


def _inline(schema: dict, definitions: dict) -> dict:
    """The schema with every ref to `_definitions.json#/$defs/X` (or, inside it, `#/$defs/X`) pointing at its own `#/$defs/X`, those defs copied in."""
    needed: dict[str, dict] = {}

    def rewrite(node):
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str) and "#/$defs/" in v:
                    name = v.split("#/$defs/", 1)[1]
                    out[k] = f"#/$defs/{name}"
                    if name not in needed:
                        needed[name] = {}
                        needed[name] = rewrite(definitions[name])
                else:
                    out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    top = rewrite(schema)
    top["$defs"] = dict(sorted(needed.items()))
    return top


def vendor_kubernetes(wheel: Path) -> None:
    prefix = f"kubernetes_validate/kubernetes-json-schema/{KUBERNETES_VERSION}-local-strict/"
    with zipfile.ZipFile(wheel) as zf:
        definitions = json.loads(zf.read(prefix + "_definitions.json"))["$defs"]
        out = HERE / f"kubernetes-{KUBERNETES_VERSION}-standalone-strict"
        for kind in KUBERNETES_KINDS:
            write(out / f"{kind}.json", _inline(json.loads(zf.read(prefix + f"{kind}.json")), definitions))
        write(out / "objectmeta-v1.json", _inline({"$ref": f"/api/_definitions.json#/$defs/{OBJECT_META}"}, definitions))


if __name__ == "__main__":
    vendor_crds(Path(sys.argv[1]))
    vendor_kubernetes(Path(sys.argv[2]))
