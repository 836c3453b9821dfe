// splicer demo: the embedded default run (filled in below).
package main

func demoCmd(args []string) error { return nil }
