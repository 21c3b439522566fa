/* Wine 8 has no ProcessPrng in bcryptprimitives.dll, which Rust's standard
 * library calls for random numbers on Windows. This stand-in, used only to
 * run ralph's tests under Wine, forwards to advapi32's RtlGenRandom
 * (exported as SystemFunction036). Never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
