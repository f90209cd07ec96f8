package fencehttp

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/fencedlock/fencedlock"
)

// ProblemContentType is the media type of the problem documents that
// WriteError writes and CheckResponse reads (RFC 9457). CheckResponse
// accepts it with parameters too, "application/problem+json;
// charset=utf-8" for instance.
const ProblemContentType = "application/problem+json"

// The problem types of fencehttp: the "type" member of the problem
// documents WriteError writes, which CheckResponse compares byte for byte
// to recognise them. Each URI leads to its documentation. They are
// permanent identifiers: they will not change, so that clients and
// servers of different versions keep recognising each other's problems.
// A problem of another type, or of one of these types with another status
// than the one given here, is reported as a *StatusError and matches no
// sentinel error.
const (
	// StaleTokenType is the problem type of 409 Conflict for an error
	// matching [fencedlock.ErrStaleToken]. The problem carries the members
	// "resource" (a string), "token" (the rejected token) and "current"
	// (the token the store holds), the tokens as decimal strings, because
	// many JSON decoders round numbers above 2^53. The resource is a JSON
	// string, so the bytes of a name that are not valid UTF-8 arrive as
	// U+FFFD.
	StaleTokenType = "https://pkg.go.dev/github.com/fencedlock/fencedlock/fencehttp#StaleTokenType"

	// InvalidTokenType is the problem type of 400 Bad Request for an error
	// matching [fencedlock.ErrInvalidToken]: a Fencing-Token header that is
	// missing or malformed (see TokenFrom), or a token the store refuses.
	InvalidTokenType = "https://pkg.go.dev/github.com/fencedlock/fencedlock/fencehttp#InvalidTokenType"

	// NotFoundType is the problem type of 404 Not Found for an error
	// matching [fencedlock.ErrNotFound].
	NotFoundType = "https://pkg.go.dev/github.com/fencedlock/fencedlock/fencehttp#NotFoundType"
)

// problem is the problem document on the wire (RFC 9457), with the
// extension members of StaleTokenType. Token and Current are encoded as
// JSON strings by their MarshalText and left out when zero.
type problem struct {
	Type     string           `json:"type"`
	Title    string           `json:"title"`
	Status   int              `json:"status"`
	Detail   string           `json:"detail,omitempty"`
	Resource string           `json:"resource,omitempty"`
	Token    fencedlock.Token `json:"token,omitempty"`
	Current  fencedlock.Token `json:"current,omitempty"`
}

// received is a problem document as CheckResponse read it. The tokens are
// kept as text, to be parsed and checked by the caller.
type received struct {
	typ, title, detail, resource string
	token, current               string
	hasToken, hasCurrent         bool
}

// decodeProblem reads a problem document by the rules of RFC 9457: it
// must be a JSON object; a member of the wrong type is ignored, as if it
// were absent; unknown members are ignored; a missing "type" is
// "about:blank". Member names are matched exactly (case-sensitive).
func decodeProblem(b []byte) (received, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return received{}, err
	}
	if members == nil {
		return received{}, errors.New("null instead of a JSON object")
	}
	str := func(name string) (string, bool) {
		raw, ok := members[name]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return "", false
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false // not a string: ignored
		}
		return s, true
	}
	var p received
	var ok bool
	if p.typ, ok = str("type"); !ok {
		p.typ = "about:blank"
	}
	p.title, _ = str("title")
	p.detail, _ = str("detail")
	p.resource, _ = str("resource")
	p.token, p.hasToken = str("token")
	p.current, p.hasCurrent = str("current")
	return p, nil
}
