package auth

import (
	"strings"
	"testing"
)

func BenchmarkCompactJWT(b *testing.B) {
	tok := strings.Repeat("abcdefghij", 30) + "." + strings.Repeat("ABCDEFGHIJ", 30) + "." + strings.Repeat("0123456789", 8) + "AA"
	b.SetBytes(int64(len(tok)))
	for b.Loop() {
		if !compactJWT(tok) {
			b.Fatal("refused")
		}
	}
}
