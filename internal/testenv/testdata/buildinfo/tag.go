//go:build testtag

package main

const tag = "tagged"
