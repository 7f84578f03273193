// Package natsnode gives mlstream its NATS: either an embedded nats-server with JetStream
// running inside the mlstream process (alone, or clustered with peer mlstream processes over
// NATS routes), or a connection to an existing NATS deployment. Either way the rest of the code
// gets a *nats.Conn and a jetstream.JetStream and does not care which.
//
// The package handles the traps found while measuring nats-server 2.15 embedded:
//
//   - Options are built from configuration text (Options.ProcessConfigString), not filled by
//     hand: hand-filled Options miss defaults that config processing sets, and a stream lost
//     its leader after a restart that way (nats-server issue #6890).
//   - JetStream's memory and file limits are always explicit; the server's default is 75% of
//     the machine's RAM and disk.
//   - A clustered JetStream needs a cluster name and routes, and its meta group's expected size
//     is taken from the number of routes. Peers are therefore passed through as given (the list
//     may include this node: the server ignores a route to itself), duplicates are dropped (a
//     duplicate would inflate the expected size so that no quorum can ever form), and a
//     cluster address without any other peer is refused (a lone clustered node never elects a
//     meta leader).
//   - nats-server 2.15 starts its routes only once its client listener is up, which never happens
//     with DontListen: a clustered DontListen server never forms a cluster (and its Shutdown
//     hangs). A clustered node without ClientAddr therefore listens on a random loopback port,
//     locked with a random token that only its own in-process connection knows, and not
//     advertised to other servers' clients. A single node without ClientAddr really does not
//     listen.
//   - "Ready for connections" is not "JetStream ready": in a cluster, API calls fail with
//     "JetStream system temporarily unavailable" (10008), or get no answer at all, until a meta
//     leader exists. Start and Connect return only once JetStream answers an account-info
//     request, which only the meta leader serves. Each readiness probe has its own short
//     deadline, because an unanswered request would otherwise wait out the caller's whole
//     context.
//   - Leader elections after a node leaves take seconds; Retry and Transient let callers ride
//     them out without retrying real failures. nats-server's Raft waits 4–9 s without its
//     leader before it elects another, and that is not an option: the embedded server's
//     timeouts are set through its package variables (Config.Election, election.go), 2–4 s by
//     default.
//   - The server's own log is adapted to slog: its informational lines go to Debug, warnings and
//     errors keep their level, and a fatal message (which would exit a stand-alone server, for
//     example when a port is taken) fails Start instead of leaving a half-started server.
//   - Close drains the connection before shutting the server down and waits for the shutdown to
//     finish; a server abandoned mid-write can corrupt its JetStream store.
//   - Connections reconnect forever: an mlstream node must never silently lose its NATS.
//
// Security (security.go): a route is a member of the cluster with every right, so routes
// authenticate with a user and password derived from the cluster secret (Config.Secret) and/or
// mutual TLS (Config.RouteTLS), and a route address or peer beyond loopback (or any route, with
// RequireRouteAuth) refuses to start without one. The client listener accepts only known users:
// the node's own connection (a password only its process knows), and with the secret the users
// SourceUser (publishes only to the jobs' source subjects, which Node.SetSourceSubjects changes
// by reloading the server's authorization; subscribes to nothing), AdminUser
// (everything) and SystemUser (in the system account, only removes JetStream peers: RemovePeer).
// ClientAddr may have TLS (Config.ClientTLS), with client certificates when a CA is named.
// These are nats-server's own mechanisms (cluster authorization and TLS, users with permissions,
// the system account), set through the configuration text.
package natsnode
