// What the external tests read of the package's insides.

package httpcore

// KernelCopies is how many times kernelCopy ran.
func KernelCopies() int64 { return kernelCopies.Load() }
