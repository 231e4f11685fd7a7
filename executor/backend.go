package executor

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"time"

	"polc.dev/polc/internal/digest"
)

// Containment classes an effect backend may enforce on a callable.
var ContainmentClasses = []string{"environment", "filesystem", "network", "secrets", "subprocess"}

// Containment levels in a capability report.
const (
	ContainmentEnforced    = "enforced"
	ContainmentUnsupported = "unsupported"
)

// BackendCapabilityReport is a backend's versioned statement of what it
// enforces on the code it runs (docs/executor.md "Backends and admission").
type BackendCapabilityReport struct {
	Format      string            `json:"format"` // "polc.backend-capabilities/v1"
	BackendID   string            `json:"backend_id"`
	Version     string            `json:"version"`
	Containment map[string]string `json:"containment"` // class → enforced|degraded|unsupported
	// Reasons say, per class that is not enforced (and per part a
	// backend states beside the classes, such as "filesystem_deny"), why.
	// Absent when empty, so reports without reasons keep their digests.
	Reasons map[string]string `json:"reasons,omitempty"`
}

// BackendCapabilityFormat is the format of v1 capability reports.
const BackendCapabilityFormat = "polc.backend-capabilities/v1"

// Digest is the sha256-v1 digest of the report's canonical JSON.
func (r BackendCapabilityReport) Digest() string { return digest.Of(r) }

// Enforces reports whether the backend enforces a containment class.
func (r BackendCapabilityReport) Enforces(class string) bool {
	return r.Containment[class] == ContainmentEnforced
}

// EffectBackend runs callables. Probe reports what it enforces; Invoke runs
// the opaque call the executor gives it, exactly once.
type EffectBackend interface {
	ID() string
	Probe(ctx context.Context) (BackendCapabilityReport, error)
	Invoke(ctx context.Context, call func(context.Context) (any, error)) (any, error)
}

// InProcessBackend runs callables in the executor's process. It contains
// nothing: an argument or path check is admission evidence, not proof that
// arbitrary code cannot touch another path or open a socket, so it reports
// every containment class unsupported.
type InProcessBackend struct{}

// ID implements EffectBackend.
func (InProcessBackend) ID() string { return InProcessBackendName }

// Probe implements EffectBackend. The report never changes; callers must
// not modify its map.
func (InProcessBackend) Probe(context.Context) (BackendCapabilityReport, error) {
	return inProcessReport, nil
}

var inProcessReport = func() BackendCapabilityReport {
	c := map[string]string{}
	for _, class := range ContainmentClasses {
		c[class] = ContainmentUnsupported
	}
	return BackendCapabilityReport{Format: BackendCapabilityFormat, BackendID: InProcessBackendName, Version: "1", Containment: c}
}()

// Invoke implements EffectBackend.
func (InProcessBackend) Invoke(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	return call(ctx)
}

// ActionPreflightReport binds, by digest, the backend and its capability
// report, the descriptor, the request and the admission lease that stage 3
// verified. It expires with the lease.
//
// Only Execute makes reports; they are used through pointers (a report
// holds an atomic and must not be copied).
type ActionPreflightReport struct {
	ReportID         string                  `json:"report_id"`
	RequestID        string                  `json:"request_id"`
	DescriptorDigest string                  `json:"action_descriptor_digest"`
	Backend          string                  `json:"effect_backend"`
	Capabilities     BackendCapabilityReport `json:"capability_report"`
	CapabilityDigest string                  `json:"capability_digest"`
	LeaseID          string                  `json:"admission_lease"`
	VerifiedAt       time.Time               `json:"verified_at"`
	ExpiresAt        time.Time               `json:"expires_at"`

	// requestDigest is RequestDigest once known. Until then request is
	// the frozen form it is computed from: the minimal profile records
	// no request digest, so its reports compute one only when read.
	requestDigest atomic.Pointer[string]
	request       requestDigestForm
}

// RequestDigest is the digest of the request the report was verified for:
// ExecutionRequest.Digest's canonical form, with the arguments as stage 2
// checked them (the same digest for arguments made of JSON values). What
// the caller or the callable changes after stage 2 does not reach it.
func (r *ActionPreflightReport) RequestDigest() string {
	if p := r.requestDigest.Load(); p != nil {
		return *p
	}
	d := r.request.digest()
	r.requestDigest.CompareAndSwap(nil, &d) // a racing reader computed the same
	return *r.requestDigest.Load()
}

// reportJSON is the report's JSON form without its methods.
type reportJSON ActionPreflightReport

// MarshalJSON encodes the report's members and its request_digest.
func (r *ActionPreflightReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		*reportJSON
		RequestDigest string `json:"request_digest"`
	}{(*reportJSON)(r), r.RequestDigest()})
}

// Digest covers the whole report, its request digest included.
func (r *ActionPreflightReport) Digest() string { return digest.Of(r) }

// missingContainment returns the classes required but not enforced.
func missingContainment(required []string, rep BackendCapabilityReport) []string {
	var out []string
	for _, c := range required {
		if !rep.Enforces(c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}
