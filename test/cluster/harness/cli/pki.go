package cli

import (
	"github.com/ovsflow/ovs-cni/test/cluster/harness/pki"
)

// cmdPKI writes a cluster's PKI:
//
//	pki ca DIR TAG                              the CA and the ServiceAccount key pair
//	pki control-plane DIR TAG SANS SERVER       the API server's and its clients' (not nodes')
//	pki node DIR NAME NODE SANS SERVER TAG      a kubelet's, NAME.crt and NAME.kubeconfig
func cmdPKI(_ env, args []string) error {
	want := map[string]int{"ca": 3, "control-plane": 5, "node": 7}
	if len(args) == 0 || want[args[0]] != len(args) {
		return usageError{"pki: want ca DIR TAG | control-plane DIR TAG SANS SERVER | node DIR NAME NODE SANS SERVER TAG"}
	}
	if args[0] == "ca" {
		_, err := pki.NewCA(args[1], args[2])
		return err
	}
	d, err := pki.Open(args[1])
	if err != nil {
		return err
	}
	if args[0] == "control-plane" {
		return d.ControlPlane(args[2], args[3], args[4])
	}
	return d.Node(args[2], args[3], args[4], args[5], args[6])
}
