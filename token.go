package fencedlock

import (
	"fmt"
	"strconv"
)

// Token is a fencing token: a number that rises with every grant of a
// resource's lock. A valid token is greater than zero; the zero Token means
// "no token" and every store refuses it.
//
// Tokens of one resource are comparable: a later grant gets a higher
// token, unless Redis lost the resource's counter and its clock is behind
// (see "What is promised" in the package documentation). Tokens of
// different resources are unrelated.
type Token uint64

// maxTokenDigits is the length of the largest uint64 in decimal.
const maxTokenDigits = 20

// ParseToken parses the decimal form of a token, as String and MarshalText
// produce it. It accepts ASCII digits only (no sign, space or prefix;
// leading zeros are allowed, up to 64 characters in all, a bound on the
// work an untrusted input can cause) and returns an error wrapping
// ErrInvalidToken for anything else, for a value that overflows 64 bits,
// and for zero.
func ParseToken(s string) (Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", ErrInvalidToken)
	}
	if len(s) > 64 {
		return 0, fmt.Errorf("%w: %d characters", ErrInvalidToken, len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %q is not a decimal number", ErrInvalidToken, s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q overflows 64 bits", ErrInvalidToken, s)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: zero is not a token", ErrInvalidToken)
	}
	return Token(n), nil
}

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MarshalText implements encoding.TextMarshaler: the decimal form, "0" for
// the zero Token.
func (t Token) MarshalText() ([]byte, error) {
	return strconv.AppendUint(make([]byte, 0, maxTokenDigits), uint64(t), 10), nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It accepts what
// ParseToken accepts and, so that the zero value round-trips, "0" as the
// zero Token. On error t is left unchanged.
func (t *Token) UnmarshalText(b []byte) error {
	if string(b) == "0" {
		*t = 0
		return nil
	}
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}
