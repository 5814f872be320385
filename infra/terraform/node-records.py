"""Deletes the node names of one machine that is going away.

SSM Automation runs this (aws:executeScript, node_records.tf) whenever an
EC2 instance of the region starts shutting down or stopping. Edge and
ingest machines publish PREFIX-INSTANCE.nodes.DOMAIN (node-boot.sh), so the
instance id alone names the records to delete; whatever the machine's
address was, or whether it still has one.

A machine that shuts down cleanly deletes its own name first, and most
instances of an account are no node at all: a name that is not there is
left alone, and a delete that loses that race is not an error.
"""


def handler(events, context):
    import boto3  # the Automation runtime has it; the tests pass a fake

    return delete_node_records(boto3.client("route53"), events)


def delete_node_records(route53, events):
    instance = events["InstanceId"]
    zone = events["ZoneId"]
    deleted = []
    for prefix in events["Prefixes"]:
        name = "%s-%s.%s." % (prefix, instance, events["Domain"])
        # Records come in name order from StartRecordName on: the first
        # one is this name's, or some other name when it has none.
        page = route53.list_resource_record_sets(
            HostedZoneId=zone, StartRecordName=name, StartRecordType="A", MaxItems="1"
        )
        for rrset in page.get("ResourceRecordSets", []):
            if rrset.get("Name") != name or rrset.get("Type") != "A":
                continue
            try:
                route53.change_resource_record_sets(
                    HostedZoneId=zone,
                    ChangeBatch={
                        "Comment": "danmaku: %s is going away" % instance,
                        # DELETE takes the record as it is, values and TTL.
                        "Changes": [{"Action": "DELETE", "ResourceRecordSet": rrset}],
                    },
                )
            except route53.exceptions.InvalidChangeBatch:
                continue  # deleted meanwhile, by the machine itself
            deleted.append(name)
    return {"deleted": deleted}
