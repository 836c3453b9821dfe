// splicer bench: the papers' experiments (filled in below).
package main

func benchCmd(args []string) error { return nil }
