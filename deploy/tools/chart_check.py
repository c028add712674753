"""What the chart must do that a schema check cannot see (run by
deploy/check.sh, with the rendering tools of render.py):

- no symbolic link in the chart, and a copy of it renders the same;
- the values schema refuses a typo'd value, naming it;
- a worker-only release (tools/testdata/values-worker-only.yaml) renders
  the workers, reaching the tally it names, and nothing of the server;
- without the Prometheus Operator's API, no ServiceMonitor or
  PrometheusRule is rendered and NOTES.txt says so; with it, they are;
- names follow nameOverride / fullnameOverride; imagePullSecrets,
  podAnnotations and the ServiceAccount reach every pod;
- a Gemini, an OpenAI and an Anthropic worker each get their provider's
  key from its Secret (and no other provider's), its base URL flag, and
  egress to that URL's port besides 443; extraEnv is passed through as
  written; a named OpenAI-compatible server needs providerApi; the
  chart's earlier Gemini value names still work.

    python chart_check.py CHART TESTDATA
"""

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from render import render, render_all

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    return [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]


def kinds(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def values_file(directory: Path, name: str, values: dict[str, Any]) -> str:
    path = directory / name
    path.write_text(yaml.safe_dump(values))
    return str(path)


def pods(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, pod metadata, pod spec) of every workload."""
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "Job"):
            template = o["spec"]["template"]
            out.append((o["metadata"]["name"], template["metadata"], template["spec"]))
    return out


KEY_ENVS = {"GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}


def worker_parts(objs: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]], set[int]]:
    """The worker container's args and env, and the ports its
    NetworkPolicy lets it reach besides DNS and tally."""
    deployment = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-worker"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    policy = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-worker"))
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]} - {53, 50051}
    return container["args"], container["env"], ports


def check_providers(chart: str, tmp: Path) -> None:
    """Each provider's worker: its key from its Secret, its base URL, its port."""
    extra_env = [
        {"name": "RUST_LOG", "value": "tally_worker=debug"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "media-s3", "key": "id"}}},
    ]
    cases = [
        # (what, values of worker, --provider, key variable, its Secret, base URL flag, egress ports)
        ("a Gemini worker (defaults)", {}, "gemini", "GEMINI_API_KEY", {"name": "gemini", "key": "api-key"},
         "--gemini-base-url=https://generativelanguage.googleapis.com", {443}),
        ("an OpenAI worker (its own Secret, extraEnv)", {"provider": "openai", "openai": {"secretName": "openai-prod", "key": "key"}, "extraEnv": extra_env},
         "openai", "OPENAI_API_KEY", {"name": "openai-prod", "key": "key"}, "--openai-base-url=https://api.openai.com/v1", {443}),
        ("an Anthropic worker (at an emulator)", {"provider": "anthropic", "anthropic": {"baseUrl": "http://anthropic-emulator:8092"}},
         "anthropic", "ANTHROPIC_API_KEY", {"name": "anthropic", "key": "api-key"},
         "--anthropic-base-url=http://anthropic-emulator:8092", {443, 8092}),
        ("an OpenAI-compatible server's worker", {"provider": "vllm", "providerApi": "openai", "openai": {"baseUrl": "http://vllm.internal/v1", "secretName": "vllm"}},
         "vllm", "OPENAI_API_KEY", {"name": "vllm", "key": "api-key"}, "--openai-base-url=http://vllm.internal/v1", {443, 80}),
        ("a Gemini worker (the earlier value names)", {"geminiSecretName": "gemini-old", "geminiKey": "k", "geminiBaseUrl": "https://gemini.example.com"},
         "gemini", "GEMINI_API_KEY", {"name": "gemini-old", "key": "k"}, "--gemini-base-url=https://gemini.example.com", {443}),
    ]
    for i, (what, worker, provider, key_env, secret, base_url, egress) in enumerate(cases):
        values = values_file(tmp, f"provider-{i}.yaml", {"worker": {"enabled": True, **worker}})
        args, env, ports = worker_parts(objects(render(chart, values)))
        keys = [e for e in env if e["name"] in KEY_ENVS]
        check(
            keys == [{"name": key_env, "valueFrom": {"secretKeyRef": secret}}],
            f"{what}: {key_env} from Secret {secret['name']} key {secret['key']}, no other provider's key",
        )
        flags = [a for a in args if a.startswith("--provider") or "-base-url=" in a]
        want = [f"--provider={provider}"] + ([f"--provider-api={worker['providerApi']}"] if "providerApi" in worker else []) + [base_url]
        check(flags == want, f"{what}: {' '.join(want)}")
        check(ports == egress, f"{what}: its NetworkPolicy opens {sorted(egress)} (443 and the base URL's port)")
        extra = worker.get("extraEnv", [])
        own = [e["name"] for e in env[: len(env) - len(extra)]]
        check(own == ["TALLY_TOKEN", key_env] and env[len(own) :] == extra, f"{what}: the chart's env, then extraEnv as written")
        notes = next(t for p, t in render_all(chart, values).items() if p.endswith("NOTES.txt"))
        check(f"{secret['name']} (key {secret['key']}, the provider's API key, as {key_env})" in notes, f"{what}: NOTES.txt names its Secret")
    try:
        render(chart, values_file(tmp, "no-api.yaml", {"worker": {"enabled": True, "provider": "vllm"}}))
        check(False, "a named provider without providerApi is refused")
    except Exception as e:  # noqa: BLE001
        check("set worker.providerApi" in str(e), "a named provider without providerApi is refused")
    for typo, name in (
        ({"openai": {"secretname": "x"}}, "secretname"),
        ({"extraEnv": [{"name": "A", "valeu": "b"}]}, "valeu"),
    ):
        try:
            render(chart, values_file(tmp, "typo.yaml", {"worker": {"enabled": True, **typo}}))
            check(False, f"the schema refuses worker {typo}")
        except Exception as e:  # noqa: BLE001
            check(f"'{name}' not allowed" in str(e), f"the schema refuses worker {typo}")


def main(chart: str, testdata: str) -> int:
    data = Path(testdata)
    tmp = Path(tempfile.mkdtemp())
    try:
        links = [p for p in Path(chart).rglob("*") if p.is_symlink()]
        check(not links, f"no symbolic link in the chart ({links})")
        copy = tmp / "copy" / "tally"
        shutil.copytree(chart, copy, symlinks=True)
        defaults = values_file(tmp, "defaults.yaml", {})
        check(render(str(copy), defaults) == render(chart, defaults), "a copy of the chart renders the same")

        try:
            render(chart, str(data / "values-typo.yaml"))
            check(False, "the schema refuses worker.replica")
        except Exception as e:  # noqa: BLE001 - the binding's error type
            check("replica" in str(e), f"the schema refuses worker.replica: {str(e).strip()}")

        worker_only = objects(render(chart, str(data / "values-worker-only.yaml")))
        found = kinds(worker_only)
        check(
            found
            == {
                ("ServiceAccount", "tally"),
                ("Deployment", "tally-worker"),
                ("Service", "tally-worker-metrics"),
                ("NetworkPolicy", "tally-worker"),
                ("PodDisruptionBudget", "tally-worker"),
                ("ServiceMonitor", "tally-worker"),
            },
            f"a worker-only release renders the workers and nothing of the server: {sorted(found)}",
        )
        worker = next(o for o in worker_only if o["kind"] == "Deployment")
        args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
        check("--server=http://tally.tally-system.svc:50051" in args, "its workers reach the tally it names")
        try:
            render(chart, values_file(tmp, "no-server.yaml", {"server": {"enabled": False}, "worker": {"enabled": True}}))
            check(False, "workers without a server to reach are refused")
        except Exception as e:  # noqa: BLE001
            check("worker.server is required" in str(e), "workers without a server to reach are refused")

        plain = kinds(objects(render(chart, defaults)))
        check(
            not any(k in ("ServiceMonitor", "PrometheusRule") for k, _ in plain),
            "without the monitoring API, no ServiceMonitor or PrometheusRule",
        )
        notes = next(t for p, t in render_all(chart, defaults).items() if p.endswith("NOTES.txt"))
        check("no ServiceMonitor and no PrometheusRule was rendered" in notes, "NOTES.txt says they were left out")
        full = kinds(objects(render(chart, str(Path(chart).parent / "k8s-values.yaml"))))
        check(
            {("ServiceMonitor", "tally"), ("ServiceMonitor", "tally-worker"), ("PrometheusRule", "tally")} <= full,
            "with the monitoring API, the ServiceMonitors and the PrometheusRule",
        )
        notes = next(t for p, t in render_all(chart, str(Path(chart).parent / "k8s-values.yaml")).items() if p.endswith("NOTES.txt"))
        check("NOTE:" not in notes and "tallyctl --server" in notes, "NOTES.txt tells how to reach it")

        named = objects(
            render(
                chart,
                values_file(
                    tmp,
                    "named.yaml",
                    {
                        "fullnameOverride": "ocr",
                        "nameOverride": "batch",
                        "imagePullSecrets": [{"name": "regcred"}],
                        "podAnnotations": {"a": "1", "b": "global"},
                        "server": {"podAnnotations": {"b": "server"}},
                        "worker": {"enabled": True},
                        "serviceAccount": {"annotations": {"iam": "role"}},
                    },
                ),
            )
        )
        names = {o["metadata"]["name"] for o in named}
        check(names <= {"ocr", "ocr-server", "ocr-worker", "ocr-migrate", "ocr-worker-metrics", "ocr-webhooks"}, f"fullnameOverride names every object: {sorted(names)}")
        check(all(o["metadata"]["labels"]["app.kubernetes.io/name"] == "batch" for o in named), "nameOverride is the name label")
        for name, meta, spec in pods(named):
            check(spec.get("imagePullSecrets") == [{"name": "regcred"}], f"{name}: imagePullSecrets")
            check(spec.get("serviceAccountName") == "ocr" and spec.get("automountServiceAccountToken") is False, f"{name}: the ServiceAccount, no token")
            expected = "server" if name == "ocr-server" else "global"
            check(meta.get("annotations", {}).get("b") == expected and meta["annotations"].get("a") == "1", f"{name}: pod annotations ({meta.get('annotations')})")
        account = next(o for o in named if o["kind"] == "ServiceAccount")
        notes = account["metadata"].get("annotations", {})
        check(notes.get("iam") == "role" and account.get("automountServiceAccountToken") is False, "the ServiceAccount carries its annotations, no token")
        job = next(o for o in named if o["kind"] == "Job")
        job_weight = int(job["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
        check(
            "pre-install" in notes.get("helm.sh/hook", "") and int(notes.get("helm.sh/hook-weight", "0")) < job_weight,
            "the ServiceAccount exists before the migration hook that runs as it",
        )

        check_providers(chart, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"chart checks: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
