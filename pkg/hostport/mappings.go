package hostport

import (
	"fmt"
	"net/netip"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/flows"
)

func invalid(format string, a ...any) error {
	return cnierr.Invalid(format, a...)
}

// Entry is one runtimeConfig.portMappings element. encoding/json matches keys
// case-insensitively, so containerd's "HostPort"/"HostIP" decode too.
type Entry struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Args carries Apache Mesos's port mappings:
// args["org.apache.mesos"].network_info.port_mappings.
type Args struct {
	Mesos *struct {
		NetworkInfo struct {
			PortMappings []MesosEntry `json:"port_mappings"`
		} `json:"network_info"`
	} `json:"org.apache.mesos,omitempty"`
}

// MesosEntry is one Mesos port mapping (no host IP).
type MesosEntry struct {
	HostPort      int    `json:"host_port"`
	ContainerPort int    `json:"container_port"`
	Protocol      string `json:"protocol,omitempty"`
}

// MaxMappings bounds the mappings of one attachment.
const MaxMappings = 4096

// Entries returns the Mesos port mappings as Entries.
func (a *Args) Entries() []Entry {
	if a == nil || a.Mesos == nil {
		return nil
	}
	out := make([]Entry, 0, len(a.Mesos.NetworkInfo.PortMappings))
	for _, m := range a.Mesos.NetworkInfo.PortMappings {
		out = append(out, Entry{HostPort: m.HostPort, ContainerPort: m.ContainerPort, Protocol: m.Protocol})
	}
	return out
}

// ParseMappings validates entries into mappings; field names the source
// ("runtimeConfig.portMappings" or the Mesos path) in errors.
func ParseMappings(entries []Entry, field string) ([]flows.Mapping, error) {
	if len(entries) > MaxMappings {
		return nil, invalid("%s: %d mappings, at most %d", field, len(entries), MaxMappings)
	}
	out := make([]flows.Mapping, 0, len(entries))
	claimed := map[[2]string]int{}
	for i, e := range entries {
		name := fmt.Sprintf("%s[%d] (hostPort %d, containerPort %d, protocol %q)", field, i, e.HostPort, e.ContainerPort, e.Protocol)
		if e.HostPort < 1 || e.HostPort > 65535 {
			return nil, invalid("%s: hostPort %d: want 1-65535", name, e.HostPort)
		}
		if e.ContainerPort < 1 || e.ContainerPort > 65535 {
			return nil, invalid("%s: containerPort %d: want 1-65535", name, e.ContainerPort)
		}
		proto, err := flows.ParseProtocol(e.Protocol)
		if err != nil {
			return nil, invalid("%s: protocol %q: want tcp, udp or sctp", name, e.Protocol)
		}
		var host netip.Addr
		if e.HostIP != "" {
			if host, err = netip.ParseAddr(e.HostIP); err != nil || host.Zone() != "" {
				return nil, invalid("%s: hostIP %q: not an IP address", name, e.HostIP)
			}
			host = host.Unmap()
		}
		m := flows.Mapping{Protocol: proto, HostIP: host, HostPort: uint16(e.HostPort), ContainerPort: uint16(e.ContainerPort)}
		key := [2]string{proto.String() + "/" + host.String(), fmt.Sprint(e.HostPort)}
		if j, dup := claimed[key]; dup {
			if out[j] == m {
				continue // the same mapping twice
			}
			return nil, invalid("%s: host port %d/%s is mapped twice", name, e.HostPort, proto)
		}
		claimed[key] = len(out)
		out = append(out, m)
	}
	return out, nil
}
