// Command memhog grows its memory on request, in C (malloc, every page
// written) or in Go (a kept slice, every page written): the helper of
// TestOutsideGoHeap, which checks that the soak's memory outside the Go
// heap climbs with the first and not the second. Each line on stdin
// ("c" or "go") grows it by 8 MiB; it answers "ok" when done.
package main

/*
#include <stdlib.h>
#include <string.h>
void *memhog_kept[1 << 16];
int memhog_n;
// Kept in a global, so that the compiler cannot drop malloc and memset.
static void leak(size_t n) {
	char *p = malloc(n);
	if (p) { memset(p, 1, n); memhog_kept[memhog_n++ & 0xffff] = p; }
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
)

const step = 8 << 20

var kept [][]byte

func main() {
	sc := bufio.NewScanner(os.Stdin)
	fmt.Println("ok")
	for sc.Scan() {
		switch sc.Text() {
		case "c":
			// In 64 KiB pieces, under glibc's mmap threshold: the malloc
			// arena grows, as a C library's small leaks would.
			for range step / (64 << 10) {
				C.leak(64 << 10)
			}
		case "go":
			for range step / (64 << 10) {
				b := make([]byte, 64<<10)
				for i := range b {
					b[i] = 1
				}
				kept = append(kept, b)
			}
		}
		fmt.Println("ok")
	}
}
