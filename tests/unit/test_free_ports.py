"""infra.reach.free_ports: the ports one Ray node is started with are distinct, even when the kernel hands the
same free port out twice in a row (a node given one port for two servers exits at start)."""
import infra.reach as reach


def test_a_port_handed_out_twice_or_already_taken_is_skipped(monkeypatch):
    handed_out = iter([40001, 40001, 6379, 40002, 40001, 40003])
    monkeypatch.setattr(reach, "free_port", lambda preferred=None: next(handed_out))
    assert reach.free_ports(3, taken=(6379,)) == [40001, 40002, 40003]


def test_no_ports_asked_for_none_given(monkeypatch):
    monkeypatch.setattr(reach, "free_port", lambda preferred=None: 1 / 0)
    assert reach.free_ports(0) == []
