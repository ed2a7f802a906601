"""Names with dots keep their own files: Path.with_suffix cut `alice.smith` to `alice`, so two
admins named alice.smith and alice.jones shared admin-alice.pem and the second was refused."""
from __future__ import annotations

from gleaner_common import pki
from gleaner_common.identity import Role


def test_two_dotted_names_get_two_sets_of_files(tmp_path):
    pki.init_ca(tmp_path)
    smith = pki.issue(tmp_path, Role.ADMIN, "alice.smith")
    jones = pki.issue(tmp_path, Role.ADMIN, "alice.jones")
    assert smith.cert.name == "admin-alice.smith.pem" and smith.key.name == "admin-alice.smith.key"
    assert jones.cert != smith.cert and jones.cert.exists() and smith.cert.exists()
