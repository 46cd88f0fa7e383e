import os

from telemetry.agent.clock import FakeClock
from telemetry.agent.kmsg import KernelLogReader, parse_line, pci_key
from telemetry.agent.xid import classify_xid, xid_table


def test_classification_table():
    assert {x: classify_xid(x).severity for x in (13, 31, 43, 45)} == dict.fromkeys(
        (13, 31, 43, 45), "app"
    )
    assert {x: classify_xid(x).severity for x in (48, 63, 64, 92, 94)} == dict.fromkeys(
        (48, 63, 64, 92, 94), "degraded"
    )
    assert {x: classify_xid(x).severity for x in (79, 74, 95, 119, 120)} == dict.fromkeys(
        (79, 74, 95, 119, 120), "down"
    )
    assert classify_xid(79).name == "GPU has fallen off the bus"
    assert classify_xid(9999).severity == "unknown"
    assert [x.code for x in xid_table()] == sorted(x.code for x in xid_table())


def test_pci_keys_match_between_nvml_and_kernel_forms():
    assert pci_key("00000000:1B:00.0") == pci_key("0000:1b:00") == (0, 0x1B, 0)
    assert pci_key("garbage") is None


def test_parse_kmsg_record_iso_line_and_bare_line():
    rec = "4,1234,5000000,-;NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', GPU has fallen off"
    x = parse_line(rec, now=99.0, boot_time=1000.0)
    assert x is not None
    assert (x.xid, x.pci, x.seq, x.occurred_at) == (79, (0, 0x1B, 0), 1234, 1005.0)
    iso = "2026-11-21T10:12:00.250000+00:00 host kernel: NVRM: Xid (PCI:0000:2a:00): 94, Contained"
    y = parse_line(iso, now=0.0, boot_time=0.0)
    assert y is not None
    assert (y.xid, y.pci, y.occurred_at, y.message) == (
        94,
        (0, 0x2A, 0),
        1_795_255_920.25,
        "Contained",
    )
    z = parse_line("NVRM: Xid (0000:3a:00): 13, Graphics Exception", now=5.0, boot_time=0.0)
    assert z is not None
    assert (z.xid, z.occurred_at) == (13, 5.0)
    assert parse_line("usb 1-1: new device", now=0.0, boot_time=0.0) is None


def test_file_reader_tails_from_the_end_and_resumes_from_its_cursor(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text("old: NVRM: Xid (PCI:0000:18:00): 13, before the agent\n")
    clock = FakeClock(100.0)
    reader = KernelLogReader(str(path), clock=clock)
    assert reader.poll() == []
    with path.open("a") as fh:
        fh.write("NVRM: Xid (PCI:0000:18:00): 31, fault\nNVRM: Xid (PCI:0000:18:00): 4")
    assert [x.xid for x in reader.poll()] == [31]
    with path.open("a") as fh:
        fh.write("3, half a line finished\n")
    assert [x.xid for x in reader.poll()] == [43]
    cursor = reader.cursor()
    reader.close()
    with path.open("a") as fh:
        fh.write("NVRM: Xid (PCI:0000:18:00): 45, after restart\n")
    again = KernelLogReader(str(path), clock=clock, cursor=cursor)
    assert [x.xid for x in again.poll()] == [45]
    again.close()


def test_file_reader_starts_over_after_truncation(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text("")
    reader = KernelLogReader(str(path), clock=FakeClock(0.0))
    path.write_text("NVRM: Xid (PCI:0000:18:00): 13, a\n" * 3)
    assert len(reader.poll()) == 3
    with path.open("w") as fh:
        fh.write("NVRM: Xid (PCI:0000:18:00): 79, b\n")
    assert [x.xid for x in reader.poll()] == [79]
    reader.close()


def test_dev_kmsg_when_readable():
    if not os.access("/dev/kmsg", os.R_OK):
        return  # containers without /dev/kmsg access: nothing to check here
    reader = KernelLogReader("/dev/kmsg", clock=FakeClock(0.0))
    reader.poll()  # must not block or raise
    assert "seq" in reader.cursor()
    reader.close()
