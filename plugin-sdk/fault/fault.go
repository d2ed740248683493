// Package fault holds the error classes that cross the plugin boundary, so the engine can tell "retry later"
// from "a person must act" without reading message text.
//
// A plugin wraps an error with the class that says what must happen next:
//
//	return fault.ConfigErr(fmt.Errorf("connect %s: password authentication failed for user %q", host, user),
//		"set the connection's password (settings.password) to the role's password")
//
// serve carries the class across gRPC as a status code plus an errdetails.ErrorInfo (domain "skippr.dev",
// reason the class name, metadata "fix"); client turns it back into an error that matches the class's
// sentinel, so the engine asks errors.Is(err, fault.ErrConfig). An error without a class is Unknown, which
// the engine treats like Transient: unclassified errors are retried, never silently, and with a bound in
// `sync --once`.
//
// The classes, and what the engine does with each:
//
//	Transient   retry from the last durable point with backoff (network, timeouts, a server restarting,
//	            a lost commit race)
//	Config      stop the pipeline, state failed: settings, credentials, privileges or the server's
//	            configuration must change (wrong password, missing grant, wal_level, a directory that cannot
//	            be created)
//	Data        stop the pipeline, state failed: a value or change cannot be carried under the pipeline's
//	            policy (an unrepresentable value with on_unrepresentable: fail, a schema change the
//	            destination cannot express)
//	Resnapshot  stop the pipeline, state failed: the source lost its position (a dropped slot, removed WAL,
//	            purged binlogs) or a table lost rows downstream; only a new snapshot of the named tables
//	            restores it
package fault

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Class is what must happen after an error.
type Class int

const (
	// Unknown: the error carries no class (a plugin older than the classes, or an unexpected failure).
	Unknown Class = iota
	// Transient: a retry from the last durable point may succeed.
	Transient
	// Config: a person must change settings, credentials, privileges or the server's configuration.
	Config
	// Data: a value or change cannot be carried under the pipeline's policy.
	Data
	// Resnapshot: the source lost its position, or a table must be copied again.
	Resnapshot
)

var classNames = map[Class]string{Unknown: "unknown", Transient: "transient", Config: "config", Data: "data", Resnapshot: "resnapshot"}

func (c Class) String() string {
	if n, ok := classNames[c]; ok {
		return n
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// ParseClass is the inverse of String; an unknown name is Unknown.
func ParseClass(name string) Class {
	for c, n := range classNames {
		if n == name {
			return c
		}
	}
	return Unknown
}

// Permanent reports whether a retry cannot help.
func (c Class) Permanent() bool { return c == Config || c == Data || c == Resnapshot }

// Sentinels, one per class, for errors.Is.
var (
	ErrTransient  = &sentinel{Transient}
	ErrConfig     = &sentinel{Config}
	ErrData       = &sentinel{Data}
	ErrResnapshot = &sentinel{Resnapshot}
)

type sentinel struct{ class Class }

func (s *sentinel) Error() string { return s.class.String() + " error" }

// Error is an error with a class and, for permanent classes, the way out.
type Error struct {
	Class Class
	// Fix says what a person does about it, in one sentence ("grant REPLICATION to role skippr").
	Fix string
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Is matches the class's sentinel.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinel)
	return ok && s.class == e.Class
}

// New wraps err with a class and a fix. A nil err stays nil.
func New(c Class, err error, fix string) error {
	if err == nil {
		return nil
	}
	return &Error{Class: c, Fix: fix, Err: err}
}

// TransientErr marks err as worth a retry.
func TransientErr(err error) error { return New(Transient, err, "") }

// ConfigErr marks err as needing a change of settings, credentials or server configuration.
func ConfigErr(err error, fix string) error { return New(Config, err, fix) }

// DataErr marks err as a value or change the pipeline cannot carry under its policy.
func DataErr(err error, fix string) error { return New(Data, err, fix) }

// ResnapshotErr marks err as a lost source position that only a new snapshot restores.
func ResnapshotErr(err error, fix string) error { return New(Resnapshot, err, fix) }

// ClassOf returns the class of the outermost classified error in err's chain; context cancellation and
// deadlines are Transient.
func ClassOf(err error) Class {
	if err == nil {
		return Unknown
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	return Unknown
}

// FixOf returns the fix of the outermost classified error in err's chain, or "".
func FixOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Fix
	}
	return ""
}

// Domain is the errdetails.ErrorInfo domain of skippr's classes.
const Domain = "skippr.dev"

var classCodes = map[Class]codes.Code{
	Unknown:    codes.Unknown,
	Transient:  codes.Unavailable,
	Config:     codes.FailedPrecondition,
	Data:       codes.InvalidArgument,
	Resnapshot: codes.DataLoss,
}

// ToStatus turns a plugin's error into the gRPC status that carries its message, class and fix. An error that
// already is a status passes unchanged.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	classified := errors.As(err, &e)
	if _, ok := status.FromError(err); ok && !classified {
		return err
	}
	if !classified && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return status.FromContextError(err).Err()
	}
	c := ClassOf(err)
	st := status.New(classCodes[c], err.Error())
	if c == Unknown {
		return st.Err()
	}
	info := &errdetails.ErrorInfo{Domain: Domain, Reason: c.String()}
	if fix := FixOf(err); fix != "" {
		info.Metadata = map[string]string{"fix": fix}
	}
	if withInfo, derr := st.WithDetails(info); derr == nil {
		st = withInfo
	}
	return st.Err()
}

// FromStatus turns a gRPC status back into an error of its class; msg becomes its message. It returns nil
// for an OK status.
func FromStatus(st *status.Status) error {
	if st == nil || st.Code() == codes.OK {
		return nil
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != Domain {
			continue
		}
		if c := ParseClass(info.Reason); c != Unknown {
			return New(c, errors.New(st.Message()), info.Metadata["fix"])
		}
	}
	// A plugin without the SDK's classes: trust only the codes that mean a retry helps.
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.ResourceExhausted:
		return New(Transient, errors.New(st.Message()), "")
	}
	return errors.New(st.Message())
}
