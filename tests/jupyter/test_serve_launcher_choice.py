"""`hived serve --launcher` picks the service class the extension hosts."""
from hived.cli.cmd_serve import build_config
from hived.cli.main import build_parser


def _config(tmp_path, *extra):
    spec = tmp_path / "s.yaml"
    spec.write_text("x: 1\n")
    args = build_parser().parse_args(["serve", "--spec", str(spec), "--data-dir", str(tmp_path), *extra])
    return build_config(args, "tok")


def test_local_is_the_default_and_keeps_the_plain_service(tmp_path):
    c = _config(tmp_path)
    assert c.HivedExtension.launcher == "local"
    assert "service_class" not in c.HivedExtension


def test_kubernetes_launcher_selects_the_recovering_service(tmp_path):
    c = _config(tmp_path, "--launcher", "kubernetes")
    assert c.HivedExtension.launcher == "kubernetes"
    assert c.HivedExtension.service_class == "hived.k8s.service.KubernetesSchedulerService"
    from hived.k8s.service import KubernetesSchedulerService  # the path names a real class
    assert KubernetesSchedulerService.__name__ == "KubernetesSchedulerService"
