package portmap

import (
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
)

// prevResult parses the prevResult as ADD and CHECK do (loadChained).
func prevResult(conf *Conf) (*current.Result, error) {
	return cnicmd.PrevResult(&conf.PluginConf, noPrevResult)
}
