"""The generated stubs of the previous release (commit 739baf0, before the protos carried the
vocabulary as enums), kept to prove that release's agents and gleanctl work with this controller
(tests/integration/test_mixed_versions.py). Never imported beside this release's protos: a
process loads one or the other."""
