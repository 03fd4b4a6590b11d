"""horarun and the rendezvous server: starting a job's ranks and letting them
find each other. See docs/rendezvous.md for the protocol."""
