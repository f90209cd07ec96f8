package fencedlock_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
)

func TestParseTokenValid(t *testing.T) {
	tests := []struct {
		in   string
		want fencedlock.Token
	}{
		{"1", 1},
		{"42", 42},
		{"007", 7},
		{"9007199254740991", 1<<53 - 1},
		{"18446744073709551615", math.MaxUint64},
		{strings.Repeat("0", 63) + "1", 1}, // 64 characters: the longest accepted
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.in, func(t *testing.T) {
			got, err := fencedlock.ParseToken(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.NotZero(t, got)
		})
	}
}

func TestParseTokenInvalid(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"zero", "0"},
		{"zeros", "0000"},
		{"negative", "-1"},
		{"plus sign", "+1"},
		{"leading space", " 1"},
		{"trailing space", "1 "},
		{"trailing newline", "1\n"},
		{"hex", "0x10"},
		{"exponent", "1e3"},
		{"decimal point", "1.0"},
		{"underscore", "1_000"},
		{"overflow by one", "18446744073709551616"},
		{"far overflow", "99999999999999999999999999"},
		{"fullwidth digit", "１"},
		{"arabic-indic digit", "١"},
		{"nul byte", "1\x00"},
		{"65 characters with leading zeros", strings.Repeat("0", 64) + "1"},
		{"65 digits", strings.Repeat("1", 65)},
		{"very long", strings.Repeat("9", 100000)},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			got, err := fencedlock.ParseToken(tc.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidToken)
			assert.Zero(t, got, "a failed parse must return the zero Token")
			assert.Less(t, len(err.Error()), 400, "the error must not echo a huge input in full")
		})
	}
}

func TestTokenString(t *testing.T) {
	assert.Equal(t, "0", fencedlock.Token(0).String())
	assert.Equal(t, "1", fencedlock.Token(1).String())
	assert.Equal(t, "1234567890123456", fencedlock.Token(1234567890123456).String())
	assert.Equal(t, "18446744073709551615", fencedlock.Token(math.MaxUint64).String())
}

func TestTokenTextRoundTrip(t *testing.T) {
	for _, tok := range []fencedlock.Token{0, 1, 9, 10, 1 << 53, math.MaxUint64 - 1, math.MaxUint64} {
		text, err := tok.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, tok.String(), string(text))

		back := fencedlock.Token(12345) // not zero, so decoding "0" must really set it
		require.NoError(t, back.UnmarshalText(text))
		assert.Equal(t, tok, back)
	}
}

func TestTokenUnmarshalTextErrorLeavesValue(t *testing.T) {
	for _, in := range []string{"", "-1", "x", "00", "1.5", "18446744073709551616", " 7"} {
		tok := fencedlock.Token(77)
		err := tok.UnmarshalText([]byte(in))
		require.Error(t, err, "input %q", in)
		assert.ErrorIs(t, err, fencedlock.ErrInvalidToken, "input %q", in)
		assert.Equal(t, fencedlock.Token(77), tok, "input %q changed the token", in)
	}
}

func TestTokenJSON(t *testing.T) {
	type record struct {
		Resource string           `json:"resource"`
		Token    fencedlock.Token `json:"token"`
	}
	for _, tc := range []struct {
		tok  fencedlock.Token
		json string
	}{
		{0, `{"resource":"r","token":"0"}`},
		{42, `{"resource":"r","token":"42"}`},
		{math.MaxUint64, `{"resource":"r","token":"18446744073709551615"}`},
	} {
		b, err := json.Marshal(record{Resource: "r", Token: tc.tok})
		require.NoError(t, err)
		assert.JSONEq(t, tc.json, string(b))
		assert.Equal(t, tc.json, string(b))

		back := record{Token: 999}
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, record{Resource: "r", Token: tc.tok}, back)
	}

	// Tokens as map keys use the same text form.
	b, err := json.Marshal(map[fencedlock.Token]string{7: "x"})
	require.NoError(t, err)
	assert.Equal(t, `{"7":"x"}`, string(b))

	back := record{Token: 5}
	err = json.Unmarshal([]byte(`{"token":"-3"}`), &back)
	require.Error(t, err)
	assert.ErrorIs(t, err, fencedlock.ErrInvalidToken)
	assert.Equal(t, fencedlock.Token(5), back.Token)
}

// referenceParseToken is the specification of ParseToken written
// independently: 1 to 64 ASCII digits whose value is from 1 to 2^64-1.
func referenceParseToken(s string) (fencedlock.Token, bool) {
	if len(s) == 0 || len(s) > 64 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() == 0 || !n.IsUint64() {
		return 0, false
	}
	return fencedlock.Token(n.Uint64()), true
}

// FuzzParseToken checks ParseToken, String, MarshalText and UnmarshalText
// on any string against referenceParseToken, the rule of ParseToken written
// independently. UnmarshalText also accepts "0" and leaves its receiver
// unchanged on error.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"", "0", "00", "1", "007",
		"18446744073709551615", // the largest uint64
		"18446744073709551616", // one more
		"99999999999999999999",
		"+1", "-1", " 1", "1 ", "0x10", "1e3", "1_000", "10",
		"9007199254740991", "9007199254740992", // 2^53-1, 2^53
		"１", // FULLWIDTH DIGIT ONE
		strings.Repeat("9", 70),
		"١", // ARABIC-INDIC DIGIT ONE
		strings.Repeat("0", 63) + "1",
		strings.Repeat("0", 64) + "1",
		strings.Repeat("0", 44) + "18446744073709551615",
		strings.Repeat("0", 64),
		"\xff", "1\xff", "\xc0\xb1", // invalid UTF-8; the last an overlong '1'
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, ok := referenceParseToken(s)
		tok, err := fencedlock.ParseToken(s)
		if ok {
			if err != nil || tok != want {
				t.Fatalf("ParseToken(%q) = (%d, %v); want (%d, nil)", s, tok, err, want)
			}
			if tok == 0 {
				t.Fatalf("ParseToken(%q) = the zero Token", s)
			}
			if got, want := tok.String(), strings.TrimLeft(s, "0"); got != want {
				t.Fatalf("ParseToken(%q).String() = %q; want %q", s, got, want)
			}
			if again, err := fencedlock.ParseToken(tok.String()); err != nil || again != tok {
				t.Fatalf("ParseToken(%q) = (%d, %v); want (%d, nil)", tok.String(), again, err, tok)
			}
			b, err := tok.MarshalText()
			if err != nil || string(b) != tok.String() {
				t.Fatalf("Token(%d).MarshalText() = (%q, %v); want (%q, nil)", tok, b, err, tok.String())
			}
		} else {
			if !errors.Is(err, fencedlock.ErrInvalidToken) || tok != 0 {
				t.Fatalf("ParseToken(%q) = (%d, %v); want (0, an error wrapping ErrInvalidToken)", s, tok, err)
			}
		}

		const sentinel fencedlock.Token = 424242
		u := sentinel
		err = u.UnmarshalText([]byte(s))
		switch {
		case s == "0":
			if err != nil || u != 0 {
				t.Fatalf("UnmarshalText(%q) = %v, leaving %d; want nil, leaving 0", s, err, u)
			}
		case ok:
			if err != nil || u != tok {
				t.Fatalf("UnmarshalText(%q) = %v, leaving %d; want nil, leaving %d", s, err, u, tok)
			}
		default:
			if !errors.Is(err, fencedlock.ErrInvalidToken) || u != sentinel {
				t.Fatalf("UnmarshalText(%q) on %d = %v, leaving %d; want an error wrapping ErrInvalidToken, leaving %d", s, sentinel, err, u, sentinel)
			}
		}
	})
}

// FuzzTokenText checks the text forms of every uint64: MarshalText and
// UnmarshalText, String and ParseToken, and JSON.
func FuzzTokenText(f *testing.F) {
	for _, n := range []uint64{0, 1, 9, 10, 1<<53 - 1, 1 << 53, math.MaxInt64, 1 << 63, math.MaxUint64} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n uint64) {
		tok := fencedlock.Token(n)
		want := strconv.FormatUint(n, 10)

		b, err := tok.MarshalText()
		if err != nil || string(b) != want {
			t.Fatalf("Token(%d).MarshalText() = (%q, %v); want (%q, nil)", n, b, err, want)
		}
		u := fencedlock.Token(424242)
		if err := u.UnmarshalText(b); err != nil || u != tok {
			t.Fatalf("UnmarshalText(%q) = %v, leaving %d; want nil, leaving %d", b, err, u, n)
		}

		if got := tok.String(); got != want {
			t.Fatalf("Token(%d).String() = %q; want %q", n, got, want)
		}
		p, err := fencedlock.ParseToken(tok.String())
		if n == 0 {
			if !errors.Is(err, fencedlock.ErrInvalidToken) || p != 0 {
				t.Fatalf("ParseToken(%q) = (%d, %v); want (0, an error wrapping ErrInvalidToken)", want, p, err)
			}
		} else if err != nil || p != tok {
			t.Fatalf("ParseToken(%q) = (%d, %v); want (%d, nil)", want, p, err, n)
		}

		type doc struct {
			Token fencedlock.Token `json:"token"`
		}
		j, err := json.Marshal(doc{tok})
		if wantJ := `{"token":"` + want + `"}`; err != nil || string(j) != wantJ {
			t.Fatalf("json.Marshal(Token %d) = (%s, %v); want (%s, nil)", n, j, err, wantJ)
		}
		back := doc{Token: 424242}
		if err := json.Unmarshal(j, &back); err != nil || back.Token != tok {
			t.Fatalf("json.Unmarshal(%s) = %v, leaving %d; want nil, leaving %d", j, err, back.Token, n)
		}
	})
}
