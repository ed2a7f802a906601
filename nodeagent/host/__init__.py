"""The only modules that touch the host: libvirt (hypervisor), domain XML (domainxml),
images and overlays (images, qemu-img), cgroups and /proc (cgroups), the host's own totals
(system, psutil), traffic shaping and tap counters (netshape, tc through pyroute2, sysfs) and
block devices (blockdev, sysfs). Everything else in nodeagent decides; these act.

They import nothing from above them (only each other and gleaner_common); the plain records
they are handed (settings) live here too, so the rules above can name them.
tests/unit/test_agent_layers.py keeps it so."""
