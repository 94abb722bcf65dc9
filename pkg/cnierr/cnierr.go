// Package cnierr holds the kinds of failure a CNI command reports with a
// code of its own, as one typed error that packages wrap with %w, and the
// one table from kind to CNI code (Code). The command layer (pkg/cnicmd)
// turns an error into the runtime's *types.Error once, at the command's
// boundary, with errors.As; inside the packages an error is a kind and a
// message, never a code.
package cnierr

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// Kind is what went wrong, as far as the runtime's next move goes.
type Kind int

const (
	// Internal is everything else (code 999).
	Internal Kind = iota
	// Config is a network config key with a value that cannot work; the
	// message names the key and the value (code 7).
	Config
	// Environment is a CNI_* variable or CNI_ARGS that cannot work (code 4).
	Environment
	// Decoding is stdin or a prevResult that does not decode (code 6).
	Decoding
	// TryAgain is OVS unreachable, unresponsive or busy (code 11).
	TryAgain
	// Unavailable is a STATUS that finds the plugin unable to serve (code 50).
	Unavailable
)

// Code is the CNI code of kind k.
func (k Kind) Code() uint {
	switch k {
	case Config:
		return types.ErrInvalidNetworkConfig
	case Environment:
		return types.ErrInvalidEnvironmentVariables
	case Decoding:
		return types.ErrDecodingFailure
	case TryAgain:
		return types.ErrTryAgainLater
	case Unavailable:
		return types.ErrPluginNotAvailable
	}
	return types.ErrInternal
}

// Error is a failure of a kind: Msg for the runtime (naming the key, for
// Config), Details as the CNI error's details, Err the cause, if any.
type Error struct {
	Kind    Kind
	Msg     string
	Details string
	Err     error
}

// Error reads as the *types.Error it becomes.
func (e *Error) Error() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + "; " + e.Details
}

func (e *Error) Unwrap() error { return e.Err }

// As lets errors.As find the *types.Error of e (CNI): what the command's
// boundary, and tests of a package's codes, ask for.
func (e *Error) As(target any) bool {
	t, ok := target.(**types.Error)
	if ok {
		*t = e.CNI()
	}
	return ok
}

// CNI is e as the runtime gets it.
func (e *Error) CNI() *types.Error {
	return types.NewError(e.Kind.Code(), e.Msg, e.Details)
}

// Invalid is a Config error: format names the key and the value.
func Invalid(format string, a ...any) *Error {
	return &Error{Kind: Config, Msg: fmt.Sprintf(format, a...)}
}

// New is an error of kind with msg and details.
func New(kind Kind, msg, details string) *Error {
	return &Error{Kind: kind, Msg: msg, Details: details}
}

// Wrap is an error of kind with msg whose details and cause are err.
func Wrap(kind Kind, msg string, err error) *Error {
	return &Error{Kind: kind, Msg: msg, Details: err.Error(), Err: err}
}
