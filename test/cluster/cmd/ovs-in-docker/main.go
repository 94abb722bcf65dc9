// Command ovs-in-docker is the Docker harness's tool: the engine, the images,
// the nodes. hack/ovs-in-docker.sh is its entry point (the README's commands,
// their flags and output lines), and calls it for the steps the Kubernetes
// cluster shares with the plain nodes.
package main

import (
	"fmt"
	"os"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/cli"
)

func main() {
	if err := cli.Main(os.Args[1:]); err != nil {
		if msg := cli.Message(err); msg != "" {
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(cli.ExitCode(err))
	}
}
