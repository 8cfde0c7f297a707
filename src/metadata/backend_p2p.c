/* backend_p2p.c: P2PHANDSHAKE: no central store (upstream TransferMetadata with
 * p2p_handshake_mode_: updateSegmentDesc/addRpcMetaEntry publish nothing, descriptors are
 * fetched from the peer's handshake daemon by the engine). Puts and deletes succeed
 * without doing anything; gets find nothing. */
#include "backend.h"
#include "mooncake/status.h"

static int p2p_get(mc_metadata *md, const char *key, char **value, size_t *len)
{
    (void)md, (void)key, (void)value, (void)len;
    return MC_OBJECT_NOT_FOUND;
}

static int p2p_put(mc_metadata *md, const char *key, const void *value, size_t len)
{
    (void)md, (void)key, (void)value, (void)len;
    return MC_OK;
}

static int p2p_del(mc_metadata *md, const char *key)
{
    (void)md, (void)key;
    return MC_OK;
}

static void p2p_destroy(mc_metadata *md)
{
    (void)md;
}

static const mc_metadata_ops p2p_ops = {
    .name = "p2p", .get = p2p_get, .put = p2p_put, .del = p2p_del, .destroy = p2p_destroy,
};

int mc__metadata_p2p_open(mc_metadata *md)
{
    md->ops = &p2p_ops;
    md->impl = NULL;
    return MC_OK;
}
