package openflow_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

func TestConntrackFlushErrorUnsupported(t *testing.T) {
	unknown := openflow.DecodeError([]byte{0, 1, 0, 4}, "ct-flush") // OFPET_BAD_REQUEST, OFPBRC_BAD_EXP_TYPE: before 3.1
	badType := openflow.DecodeError([]byte{0, 1, 0, 1}, "ct-flush")
	refused := openflow.DecodeError([]byte{0, 14, 0, 1}, "ct-flush") // OFPET_BAD_PROPERTY: known, content refused
	for _, tc := range []struct {
		name string
		errs []error
		want bool
	}{
		{"unknown subtype", []error{unknown, unknown}, true},
		{"unknown type", []error{badType}, true},
		{"content refused", []error{refused}, false},
		{"one of two refused", []error{unknown, refused}, false},
		{"no OpenFlow error", []error{errors.New("broken pipe")}, false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := error(&openflow.ConntrackFlushError{Errs: tc.errs})
			if !errors.Is(err, openflow.ErrConntrackFlush) {
				t.Errorf("errors.Is(%v, openflow.ErrConntrackFlush) = false", err)
			}
			var fe *openflow.ConntrackFlushError
			if got := errors.As(fmt.Errorf("wrapped: %w", err), &fe) && fe.Unsupported(); got != tc.want {
				t.Errorf("Unsupported() = %v, want %v", got, tc.want)
			}
		})
	}
}
