package nodes

import (
	"fmt"
	"os/exec"
)

// ethtoolTxOff turns TX checksum offload off on a Linux interface.
func ethtoolTxOff(ifname string) error {
	if out, err := exec.Command("ethtool", "-K", ifname, "tx", "off").CombinedOutput(); err != nil {
		return fmt.Errorf("ethtool -K %s tx off: %w: %s", ifname, err, out)
	}
	return nil
}
