package normalize

import "fmt"

// Normalization reasons: why a request is denied before any policy runs.
// They are stable codes, like decision reasons.
const (
	ReasonInvalidRequest = "invalid_request"
	ReasonUnknownAction  = "unknown_action"
	ReasonPathEscape     = "path_escape"
	ReasonInvalidPath    = "invalid_path"
	ReasonInvalidCommand = "invalid_command"
	ReasonEmptyCommand   = "empty_command"
	ReasonInvalidURL     = "invalid_url"
	// ReasonInvalidEncoding: a string of the request (or one decoded from
	// it: a shell word after its escapes, a percent-decoded MCP resource)
	// is not valid UTF-8, or a normalized value holds a NUL byte.
	ReasonInvalidEncoding = "invalid_encoding"
)

// NormalizeError is a request that cannot be normalized; it is always a
// denial with Reason as its stable reason code.
type NormalizeError struct {
	Reason string
	Detail string
}

func (e *NormalizeError) Error() string { return e.Reason + ": " + e.Detail }

// Errorf is a *NormalizeError with the given reason code and a detail
// formatted as by fmt.Sprintf.
func Errorf(reason, format string, args ...any) *NormalizeError {
	return &NormalizeError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// TimeLayout is the time format of normalized requests, snapshots and
// evidence: UTC with exactly six fractional digits. Strings in this format
// order like the times they denote.
const TimeLayout = "2006-01-02T15:04:05.000000Z"
