package cnierr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestAsCNI(t *testing.T) {
	cause := errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		err      error
		code     uint
		msg, det string
	}{
		{"config", Invalid(`"bridge" %q: no such bridge`, "br9"), types.ErrInvalidNetworkConfig, `"bridge" "br9": no such bridge`, ""},
		{"environment", New(Environment, "CNI_NETNS", "x"), types.ErrInvalidEnvironmentVariables, "CNI_NETNS", "x"},
		{"decoding", New(Decoding, "prevResult: bad", ""), types.ErrDecodingFailure, "prevResult: bad", ""},
		{"try again, wrapped", fmt.Errorf("listing ports: %w", Wrap(TryAgain, "ovsdb unreachable", cause)), types.ErrTryAgainLater, "ovsdb unreachable", "connection refused"},
		{"unavailable", Wrap(Unavailable, "ovsdb unusable", cause), types.ErrPluginNotAvailable, "ovsdb unusable", "connection refused"},
		{"internal", New(Internal, "boom", ""), types.ErrInternal, "boom", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *types.Error
			if !errors.As(tc.err, &e) {
				t.Fatalf("errors.As found no *types.Error in %v", tc.err)
			}
			if e.Code != tc.code || e.Msg != tc.msg || e.Details != tc.det {
				t.Errorf("got %d %q %q, want %d %q %q", e.Code, e.Msg, e.Details, tc.code, tc.msg, tc.det)
			}
		})
	}
	if w := Wrap(TryAgain, "x", cause); !errors.Is(w, cause) {
		t.Errorf("Wrap: errors.Is lost the cause")
	}
}
