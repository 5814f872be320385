// Package funclen holds no code. Its test parses every non-test Go file of
// the repository and fails on a function over MaxLines lines, so that each
// function can be read in one sitting: a long one is cut into steps (a
// table of contents calling one function per step), not allowlisted. The
// allowlist in the test is for flat declaration lists (flags, metrics),
// each with its length and why.
package funclen

// MaxLines is the longest a function may be, from `func` to its closing
// brace.
const MaxLines = 100
