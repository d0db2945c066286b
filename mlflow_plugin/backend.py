"""``mlflow run --backend hived``: an MLflow project backend that submits BE jobs.

``run()`` does what MLflow's local backend does up to the point of starting
the command (fetch and validate the project, create the run with its params
and source tags, build the entry point command), then hands the command to
the hived service as a best-effort job whose environment points
``mlflow.start_run()`` at that run.

The ``mlflow run`` CLI never waits for plugin backends (it passes
``synchronous=False``), so when called from it this backend blocks itself,
prints the job's output, sets the run's terminal status and fails the
command the way the local backend does; ``{"detach": true}`` returns at once.
"""
from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys

from mlflow.entities import RunTag
from mlflow.exceptions import ExecutionException, MlflowException
from mlflow.projects.backend.abstract_backend import AbstractBackend
from mlflow.projects.utils import (
    fetch_and_validate_project,
    get_entry_point_command,
    get_or_create_run,
    get_run_env_vars,
    load_project,
)
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PROJECT_BACKEND, MLFLOW_RUN_NAME

from hived.mlflow_plugin.config import BackendConfig, HivedBackendError, parse_config
from hived.mlflow_plugin.history import KIND_TAG, SIGNATURE_TAG, MlflowHistory, project_signature
from hived.mlflow_plugin.resume import attempts_in, checkpoint_dir_for, wrap_command
from hived.mlflow_plugin.submitted_run import EARLIER_TAG, TAG, HivedSubmittedRun, count_tag, print_sink
from hived.service.client import HivedClient, HivedError, HivedUnreachable
from hived.service.submit_flags import program_of

# under "mlflow." so that `mlflow run` shows our lines the way it shows the local backend's
_logger = logging.getLogger("mlflow.projects.hived")


def mlflow_cli_params() -> dict | None:
    """The options of the enclosing ``mlflow run`` command; None under mlflow.projects.run()."""
    try:
        import click
    except ImportError:  # pragma: no cover - mlflow depends on click
        return None
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        callback = getattr(ctx.command, "callback", None)
        if callback is not None and getattr(callback, "__module__", "") == "mlflow.cli" \
                and ctx.command.name == "run":
            return dict(ctx.params)
        ctx = ctx.parent
    return None


def called_from_mlflow_cli() -> bool:
    return mlflow_cli_params() is not None


def connect(cfg: BackendConfig) -> HivedClient:
    """A client for the configured service, checked to answer; one-line errors."""
    try:
        client = HivedClient(url=cfg.service_url, token=cfg.token)
        client.status()   # a hived service answers there (not just any web server)
        client.vc(cfg.vc)  # unknown VC or no access: refused before the run exists
    except HivedUnreachable as exc:
        raise HivedBackendError(f"hived backend: {exc.message}; start one with 'hived serve' "
                                f"or set service_url in --backend-config") from None
    except HivedError as exc:
        raise HivedBackendError(str(exc)) from None
    return client


def history_estimate(tracking_uri: str | None, experiment_id: str, sig: str) -> float | None:
    """Median run time of earlier finished runs of this project + entry point, as the job's hint."""
    try:
        past = list(MlflowHistory(tracking_uri, experiment_ids=[experiment_id], max_runs=50)
                    .durations(sig, "gpu"))
    except Exception as exc:  # a hint only: a store hiccup must not stop the submission
        _logger.debug("no history estimate: %s", exc)
        return None
    return max(round(statistics.median(past), 3), 0.001) if past else None


def absolute_tracking_uri(uri: str | None) -> str | None:
    """A relative ``sqlite:///mlflow.db`` made absolute: the job runs in another directory,
    where the relative path would name another (empty) store and "Run not found"."""
    prefix = "sqlite:///"
    if not uri or not uri.startswith(prefix) or uri.startswith(prefix + "/") or ":memory:" in uri:
        return uri
    path, sep, query = uri[len(prefix):].partition("?")
    return prefix + os.path.abspath(path) + sep + query


def job_needs(command: str, checkpoint_dir: str, tracking_uri: str | None) -> dict:
    """What the job's unix account must reach besides its workdir (a root-run hived runs jobs
    under other accounts and checks these at submission, before anything runs): the entry
    point's program, the checkpoint directory and a local tracking store's folder."""
    writable = [checkpoint_dir]
    store = local_store_dir(tracking_uri)
    if store:
        writable.append(store)
    program = program_of(command)
    return {"programs": [program] if program else [], "writable": writable}


def local_store_dir(uri: str | None) -> str | None:
    """The folder a local tracking store writes: sqlite's (its journal files go beside the
    database) or a file store's; None for a tracking server."""
    if not uri:
        return None
    if uri.startswith("sqlite:///") and ":memory:" not in uri:
        path = uri[len("sqlite:///"):].partition("?")[0]
        return os.path.dirname(path) if os.path.isabs(path) else None
    if uri.startswith("file://"):
        return uri[len("file://"):] or None
    return uri if os.path.isabs(uri) else None


def follow_in_background(submitted: HivedSubmittedRun, cfg: BackendConfig,
                         tracking_uri: str | None) -> None:
    """Keep a detached run in step with its job while nobody waits on it: a preempted run
    whose code ended it on SIGTERM goes back to RUNNING, and the run gets its terminal
    status when the job ends. A process of its own session (it outlives `mlflow run`);
    the token travels in its environment, never on its command line."""
    log_path = os.path.join(checkpoint_dir_for(submitted.run_id, cfg.checkpoint_dir), "follow.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = dict(os.environ)
    if submitted.client.token:
        env["HIVED_TOKEN"] = submitted.client.token
    argv = [sys.executable, "-m", "hived.mlflow_plugin", "follow", submitted.run_id, "--quiet"]
    if tracking_uri:
        argv += ["--tracking-uri", tracking_uri]
    with open(log_path, "ab") as log:
        subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, close_fds=True)
    _logger.info("=== a background follower keeps run %s in step with job %s (log: %s) ===",
                 submitted.run_id, submitted.job_id, log_path)


class HivedProjectBackend(AbstractBackend):
    def run(self, project_uri, entry_point, params, version, backend_config,
            tracking_uri, experiment_id):
        cfg = parse_config(backend_config)
        tracking_uri = absolute_tracking_uri(tracking_uri)
        client = connect(cfg)
        work_dir = fetch_and_validate_project(project_uri, version, entry_point, params)
        project = load_project(work_dir)
        if project.docker_env:
            raise HivedBackendError("hived backend: docker_env projects are not supported; "
                                    "the entry point runs in the job's own environment")
        command = get_entry_point_command(project, entry_point, params,
                                          cfg.mlflow.get("STORAGE_DIR"))[0]
        cli = mlflow_cli_params()
        # `mlflow run --run-id X` continues run X; MLflow hands that id to its local backend
        # only, so a plugin reads it from the command line (ignoring it would be silent)
        existing = cfg.mlflow.get("_mlflow_local_backend_run_id") or (cli or {}).get("run_id")
        try:
            run = get_or_create_run(existing, project_uri, experiment_id, work_dir, version,
                                    entry_point, params)
        except MlflowException as exc:  # e.g. --run-id of no run: one line, not a traceback
            if not existing:
                raise
            raise HivedBackendError(f"hived backend: --run-id {existing}: "
                                    f"{str(exc.message).splitlines()[0]}") from None
        run_id = run.info.run_id
        if cli is not None and cli.get("run_name"):
            # MLflow names the run only after a plugin returns; a refused or failed blocking
            # run never would be
            MlflowClient(tracking_uri).set_tag(run_id, MLFLOW_RUN_NAME, cli["run_name"])
        submitted = self._submit(cfg, client, project.name or "mlflow", entry_point, command,
                                 work_dir, run_id, experiment_id, tracking_uri,
                                 created=not existing)
        if cli is not None and not cfg.detach:
            return self._block(submitted)
        if cfg.detach or cli is not None:
            _logger.info("=== hived job %s runs MLflow run %s (detached) ===",
                         submitted.job_id, run_id)
            if cfg.detach and cfg.follow:
                follow_in_background(submitted, cfg, tracking_uri)
        elif cfg.mlflow.get("SYNCHRONOUS"):
            # mlflow.projects.run(synchronous=True) waits next; the local backend's command
            # writes to this process's stdout meanwhile, so the job's output does too
            submitted.log_sink = print_sink
        return submitted

    def _submit(self, cfg: BackendConfig, client: HivedClient, project_name: str,
                entry_point: str, command: str, work_dir: str, run_id: str,
                experiment_id: str, tracking_uri: str | None,
                created: bool = True) -> HivedSubmittedRun:
        mlflow = MlflowClient(tracking_uri)
        ckpt = checkpoint_dir_for(run_id, cfg.checkpoint_dir)
        earlier = attempts_in(ckpt)
        if not created and earlier:
            # the job sees HIVED_RESUMED=1 and the old checkpoint: say so, and how to start afresh
            _logger.warning("=== --run-id %s: continuing from its checkpoint directory %s (%d earlier "
                            "attempt(s), HIVED_RESUMED=1); remove that directory to start from scratch ===",
                            run_id, ckpt, earlier)
        env = get_run_env_vars(run_id, experiment_id)
        uri = absolute_tracking_uri(tracking_uri or env.get("MLFLOW_TRACKING_URI"))
        if uri:
            env["MLFLOW_TRACKING_URI"] = uri
        payload = cfg.job_payload(wrap_command(command, ckpt), env, os.path.abspath(work_dir),
                                  f"mlflow-{project_name}-{entry_point}-{run_id[:8]}")
        payload["needs"] = job_needs(command, ckpt, uri)
        sig = project_signature(project_name, entry_point)
        estimate = history_estimate(tracking_uri, experiment_id, sig)
        if estimate is not None:
            payload["estimate"] = estimate
        try:
            job = client.submit(payload)
        except HivedError as exc:
            # nothing will run: the run ends FAILED with the refusal on it, never left RUNNING
            mlflow.log_batch(run_id, tags=[RunTag(MLFLOW_PROJECT_BACKEND, "hived"),
                                           RunTag(TAG + "refused", exc.line()[:5000]),
                                           RunTag(TAG + "state", "refused")])
            mlflow.set_terminated(run_id, "FAILED")
            raise HivedBackendError(f"{exc}; MLflow run {run_id} is FAILED") from None
        # a continued run keeps counting its preemptions from where its earlier jobs left it
        earlier = 0 if created else count_tag(mlflow.get_run(run_id).data.tags.get(TAG + "preemptions"))
        tags = {MLFLOW_PROJECT_BACKEND: "hived", TAG + "job_id": job["id"],
                TAG + "vc": cfg.vc, TAG + "job_class": cfg.priority,
                TAG + "service_url": client.url, TAG + "checkpoint_dir": ckpt,
                TAG + "gpus_requested": str(cfg.pods * cfg.gpus) if cfg.gpus is not None else cfg.cell,
                SIGNATURE_TAG: sig, KIND_TAG: "gpu", EARLIER_TAG: str(earlier)}
        if estimate is not None:
            tags[TAG + "estimate_seconds"] = f"{estimate:.3f}"
        mlflow.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        _logger.info("=== Submitted MLflow run %s as hived job %s in VC %s ===",
                     run_id, job["id"], cfg.vc)
        submitted = HivedSubmittedRun(run_id, job["id"], client, tracking_uri=tracking_uri,
                                      poll=cfg.poll, earlier_preemptions=earlier)
        submitted.job = job
        submitted.sync_status(job)   # a queued job's run is SCHEDULED, not RUNNING
        return submitted

    @staticmethod
    def _block(submitted: HivedSubmittedRun) -> HivedSubmittedRun:
        """What ``--backend local`` does in the CLI: follow to the end, fail loudly."""
        submitted.log_sink = print_sink
        try:
            ok = submitted.wait()
        except KeyboardInterrupt:
            _logger.error("=== Run (ID '%s') interrupted, cancelling hived job %s ===",
                          submitted.run_id, submitted.job_id)
            submitted.log_sink = None
            submitted.cancel()
            raise
        except HivedError as exc:
            raise HivedBackendError(str(exc)) from None
        if not ok:
            raise ExecutionException(f"Run (ID '{submitted.run_id}') failed "
                                     f"(hived job {submitted.job_id} {submitted.job.get('state')})")
        _logger.info("=== Run (ID '%s') succeeded ===", submitted.run_id)
        return submitted
