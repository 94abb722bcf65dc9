package endpoint

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for ep, ok := range map[string]bool{
		"unix:/var/run/openvswitch/db.sock": true,
		"tcp:127.0.0.1:6640":                true,
		"tcp:[::1]:6640":                    true,
		"unix:":                             false,
		"tcp:127.0.0.1":                     false,
		"/var/run/openvswitch/db.sock":      false,
		"ssl:127.0.0.1:6640":                false,
		"tcp:ovsdb.example.org:6640":        true,
		"tcp:a:6640":                        true,
		"tcp:-a:6640":                       false,
		"tcp:a.:6640":                       false,
		"tcp:a_b:6640":                      false,
		"tcp:" + strings.Repeat("a", 253) + ":6640": true,
		"tcp:" + strings.Repeat("a", 254) + ":6640": false,
	} {
		if _, err := Parse(ep); (err == nil) != ok {
			t.Errorf("Parse(%q) = %v, want ok=%v", ep, err, ok)
		}
	}
}
