"""The only modules that touch the host: libvirt (hypervisor), domain XML (domainxml),
images and overlays (images, qemu-img), cgroups, traffic shaping (netshape, tc through
pyroute2) and block devices (blockdev). Everything else in nodeagent decides; these act."""
