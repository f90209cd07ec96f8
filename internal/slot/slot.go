// Package slot computes Redis Cluster hash slots, as the servers do.
package slot

import "strings"

// Of returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func Of(key string) uint16 { return CRC(Hashed(key)) }

// Hashed returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the next "}" when it is not empty, else the
// whole key.
func Hashed(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// CRC returns CRC16 (XMODEM) of s modulo 16384: the slot of a hashed
// part.
func CRC(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
