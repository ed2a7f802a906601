"""What the controller, the node agent and gleanctl all use: identities and roles, TLS and the
PKI, gRPC channel and server set-up with authorization, configuration parsing, logging, and the
rules for ids and names. It imports neither libvirt nor pyroute2, so the controller and gleanctl
never load them."""
