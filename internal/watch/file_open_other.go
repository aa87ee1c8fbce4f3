//go:build !unix

package watch

// fileOpenNonBlock is zero where opening a file never waits for a writer.
const fileOpenNonBlock = 0
