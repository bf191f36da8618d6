"""What a test asks of the lab after a VM is gone."""


def assert_vm_gone(lab, vm) -> None:
    assert vm.instance_id not in lab.vms
    assert vm.processes() == []
    assert lab.leftovers() == []
