// Command mlstream is the mlstream service and its tools:
//
//	mlstream serve  [--config jobs.yaml] [--addr 127.0.0.1:8080] [--data ./data] [--auth-file tokens] [--tls-cert c --tls-key k]
//	mlstream demo   [--addr 127.0.0.1:8080] [--rate 2000] [--nodes 3]
//	mlstream replay FILE --stream S --url http://localhost:8080 [--rate R] [--batch N]
//	mlstream model export|import|inspect ...
//	mlstream version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `mlstream: online learning, synopses and joins on event streams.

Usage:
  mlstream serve  [--config FILE] [--addr 127.0.0.1:8080] [--data DIR]
                  [--auth-file FILE] [--tls-cert FILE --tls-key FILE]
                                                               run the service (jobs from --config, or added at run time)
  mlstream demo   [--addr 127.0.0.1:8080] [--rate 2000] [--nodes N]
                                                               the service with demo jobs and a built-in event generator;
                                                               --nodes 3: a cluster of 3 nodes on loopback
  mlstream replay FILE --stream S [--url URL] [--rate R] [--batch N]
                                                               stream an NDJSON file to a server
  mlstream model  export|import|inspect ...                    a job's model to and from a file; what a file holds
  mlstream cluster password --cluster-secret FILE [--user U]   the password of a NATS user of --nats-listen
  mlstream cluster peer-remove NAME --server URL --cluster-secret FILE
                                                               remove a departed node from JetStream's peers
  mlstream version                                             print the version, commit and Go version

Listening beyond loopback needs bearer tokens (--auth-file, or
MLSTREAM_TOKENS=admin:TOKEN) or --insecure-no-auth.
Run "mlstream COMMAND -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "demo":
		err = runDemo(ctx, args[1:], stdout, stderr)
	case "replay":
		err = runReplay(ctx, args[1:], stdout, stderr)
	case "model":
		err = runModel(ctx, args[1:], stdout, stderr)
	case "cluster":
		err = runClusterCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		readBuildInfo().print(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "mlstream: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errUsage) {
			return 2
		}
		fmt.Fprintln(stderr, "mlstream:", err)
		return 1
	}
	return 0
}
