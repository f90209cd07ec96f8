package fencedlock_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
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
			assert.False(t, got.IsZero())
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
	assert.True(t, fencedlock.Token(0).IsZero())
	assert.False(t, fencedlock.Token(1).IsZero())
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

// ltReferenceParse is the specification of ParseToken written
// independently: 1 to 64 ASCII digits whose value is from 1 to 2^64-1.
func ltReferenceParse(s string) (fencedlock.Token, bool) {
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

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"", "0", "1", "007", "00", "10", "-1", "+1", " 1", "1 ", "0x10", "1e3",
		"9007199254740991", "9007199254740992", "18446744073709551615",
		"18446744073709551616", "１", strings.Repeat("0", 63) + "5",
		strings.Repeat("0", 64) + "5", strings.Repeat("9", 70),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencedlock.ParseToken(s)
		want, valid := ltReferenceParse(s)
		if err != nil {
			if !errors.Is(err, fencedlock.ErrInvalidToken) {
				t.Fatalf("ParseToken(%q) error %v does not wrap ErrInvalidToken", s, err)
			}
			if tok != 0 {
				t.Fatalf("ParseToken(%q) failed but returned %d", s, tok)
			}
			if valid {
				t.Fatalf("ParseToken(%q) rejected a valid token %d: %v", s, want, err)
			}
			return
		}
		if !valid {
			t.Fatalf("ParseToken(%q) = %d, want an error", s, tok)
		}
		if tok != want {
			t.Fatalf("ParseToken(%q) = %d, want %d", s, tok, want)
		}
		if got := tok.String(); got != strings.TrimLeft(s, "0") {
			t.Fatalf("ParseToken(%q).String() = %q, want the input without leading zeros", s, got)
		}
		again, err := fencedlock.ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("round trip of %d: got %d, %v", tok, again, err)
		}
		text, err := tok.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back fencedlock.Token
		if err := back.UnmarshalText(text); err != nil || back != tok {
			t.Fatalf("text round trip of %d: got %d, %v", tok, back, err)
		}
	})
}
