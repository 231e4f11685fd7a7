package builtin

// Callables exposes the callables to this package's tests, which check
// what each does at the point of use whatever the policy said.
var Callables = callables

// DefaultHTTPClient exposes http_get's default client.
var DefaultHTTPClient = defaultHTTPClient
