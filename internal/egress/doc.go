// Package egress is the HTTP proxy through which a sandboxed action with
// network.mode allowlist reaches the network. The action runs in a network
// namespace whose only way out is this proxy (reached through a unix
// socket a launcher forwards to); the proxy lets a connection through only
// to a destination its Admit callback admits, and logs every connection
// for the action's result.
//
// # What is proxied
//
// Each client connection carries exactly one request; the proxy answers
// it with "Connection: close" and closes. A client that pipelines or
// reuses the connection for a second request never has that request
// read, so every destination reached was admitted on its own (there is no
// "first request to an allowed host, second to a denied one").
//
//   - CONNECT host:port (what curl, git, pip and npm send for https:// when
//     HTTPS_PROXY is set): the proxy dials host:port, answers
//     "200 Connection established", and copies bytes both ways until both
//     sides have closed. The tunnel's content (TLS) is not inspected.
//   - Plain HTTP forward proxying for HTTP_PROXY, with the request-target
//     in absolute form: DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT of
//     http://host[:port]/path?query (port 80 by default). The request goes
//     to the destination in origin form ("/path?query") over a fresh
//     connection, with Host set to the destination as admitted, the
//     hop-by-hop headers (Connection and those it names, Proxy-Connection,
//     Keep-Alive, Proxy-Authorization, Proxy-Authenticate, TE, Trailer,
//     Transfer-Encoding, Upgrade) and Expect removed, "Connection: close"
//     added, and the body re-framed (Content-Length, or chunked with its
//     trailers): what the destination reads as this request's body is
//     exactly the body the proxy read, never a second request. The one
//     final response is relayed with its hop-by-hop headers removed;
//     interim 1xx responses are dropped (the proxy itself answers
//     "Expect: 100-continue" once the destination is connected), and a 101
//     is a bad response, since no upgrade was asked for. HTTP/1.0 clients
//     get unchunked responses.
//
// Bodies are streamed both ways, never buffered whole.
//
// # What is refused
//
// Every refusal is a response with "Connection: close" and a text/plain
// body "polc egress: <reason>" (no body for HEAD), and a log entry with
// Admitted false unless noted:
//
//   - 400 Bad Request: an unreadable request line or header; an
//     origin-form ("/path") or "*" target; a target that is not http://
//     (https:// must use CONNECT); a CONNECT target that is not host:port
//     or has no port; a CONNECT with a body; an authority with userinfo
//     ('@'), with no host, with an empty, non-decimal, zero-padded or
//     out-of-range port (ports are 1..65535), with an unbracketed IPv6
//     address or a bracketed non-IPv6 one (or one with a zone); a host
//     with bytes other than ASCII letters, digits, '-', '_' and '.'
//     (non-ASCII names must be sent as xn--, percent-encoding is refused),
//     with an empty label, longer than 253 bytes or with a label over 63;
//     an IPv4 address with a trailing dot; a fragment; any host
//     normalize.URLHost refuses (the unspecified address, loopback
//     addresses other than 127.0.0.1 and ::1, names whose last label is a
//     number such as 2130706433 or 0x7f.1).
//   - 403 Forbidden: Admit refused the destination (Reason is Admit's); a
//     nil Admit refuses everything.
//   - 405 Method Not Allowed (with Allow): any other method, TRACE
//     included.
//   - 408 Request Timeout: the request header did not arrive within
//     IdleTimeout of the connection being accepted.
//   - 431 Request Header Fields Too Large: request line and header over
//     MaxHeaderBytes.
//   - 505 HTTP Version Not Supported: a version other than HTTP/1.x.
//   - 502 Bad Gateway (Admitted true, Error set): the dial failed, or the
//     destination's response was malformed, had a header over 1 MiB, or
//     did not start within IdleTimeout.
//   - 503 Service Unavailable (no log entry, counted by Dropped): the log
//     already holds MaxLog entries.
//
// A host is normalised only where that is unambiguous: ASCII case is
// folded, one trailing dot is dropped, an IPv6 literal loses its brackets
// and takes its canonical text (an IPv4-mapped one becomes the IPv4
// address). Anything else that could be read more than one way is
// refused, not guessed at.
//
// # Names, addresses and DNS rebinding
//
// Admit decides on the name the client asked for (or the IP literal, passed
// as written after the normalisation above), and the proxy then dials that
// same name: the name is resolved by Proxy.Dial after admission, and the
// resolved address is not checked again. Admitting a name therefore trusts
// whoever controls its DNS: a name that resolves to 127.0.0.1 or to a
// private address reaches that address through the proxy. Policies must
// admit only names whose resolution they trust; IP literals are judged as
// the literal.
//
// The proxy's own dials never consult HTTP_PROXY, HTTPS_PROXY or NO_PROXY:
// the default Dial is a plain net.Dialer.
//
// # Log
//
// Log returns one Conn per accepted connection, in accept order, including
// connections that sent no request (Method empty, Reason says why) and
// refused ones. As JSON an entry is
//
//	{"method":"CONNECT","host":"example.com","port":443,"admitted":true,
//	 "reason":"...","status":200,"bytes_up":517,"bytes_down":4120}
//
// with "error" added when an admitted connection ended abnormally. For a
// tunnel the byte counts are the tunnelled bytes; for plain HTTP they are
// the request as written to the destination and the response as written
// to the client.
//
// # Limits
//
//   - MaxConns (default 64): connections served at once; further ones wait
//     in the listener's backlog until one ends.
//   - MaxHeaderBytes (default 64 KiB): request line and header.
//   - IdleTimeout (default 2 minutes): the time for the whole request
//     header, for a dial, and the longest time a connection may go with no
//     byte moving in either direction.
//   - MaxLog (default 10000): log entries; beyond it connections get 503.
//   - Fixed: a response header (each, interim ones included) over 1 MiB is
//     a 502, as are more than 16 interim responses; trailers are bounded
//     by net/http's 4 KiB read buffer.
//
// Serve returns when its context is done or its listener fails, after
// closing the listener and every connection it accepted or dialled and
// waiting for all its goroutines.
package egress
